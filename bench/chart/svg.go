// Package chart draws the small standalone SVG charts of the scenarios' reports.
package chart

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Chart is a small chart the scenarios write as a standalone SVG file: lines over a
// numeric x axis, or bars grouped by category when Categories is set.
type Chart struct {
	Title, XLabel, YLabel string
	// Categories, if set, makes a grouped bar chart: Series[i].Y[j] is series i's bar in
	// category j (X is not used). Otherwise each series is a line through (X[k], Y[k]).
	Categories []string
	Series     []Series
	// VLines and HLines are dashed reference lines at an x (line charts only) or a y.
	VLines, HLines []Marker
	// YMin, YMax fix the y range when YMax > YMin; otherwise it spans 0 and the data
	// (with YLog: the decades around the positive data).
	YMin, YMax float64
	// YLog draws the y axis on a base-10 log scale, for values that span decades. Values
	// at or below zero are drawn at the axis floor; bars rise from it.
	YLog bool
	// Panels draws each line in its own panel, stacked over a shared x axis and y
	// range, so that lines which coincide stay visible. Line charts only.
	Panels bool
	// PanelY, with Panels, gives each panel a y range of its own, for lines of
	// different units (a latency over a rate): each series' name, at the right of its
	// panel, then says its unit.
	PanelY bool
}

// Series is one line, or one bar per category.
type Series struct {
	Name string
	// X and Y are a line's points (a NaN y leaves a gap), or Y a bar per category.
	X, Y []float64
	// Low and High, if set (bar charts), draw a whisker from Low[j] to High[j].
	Low, High []float64
	// Step draws a line as steps: each value holds until the next x.
	Step bool
	// YLog, in a chart with PanelY, draws this series' panel on a log scale, as the
	// chart's YLog does every panel.
	YLog bool
	// Overlay, in a chart with Panels, draws this line in the panel of the series
	// before it, on the same y axis, instead of a panel of its own.
	Overlay bool
}

// Marker is a reference line with an optional label.
type Marker struct {
	At    float64
	Label string
}

// chartPalette holds distinguishable colours (Okabe–Ito).
var chartPalette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}

// Chart geometry, in SVG user units.
const (
	svgW, svgH                 = 760.0, 380.0
	plotL, plotR, plotT, plotB = 64.0, 190.0, 36.0, 48.0
	panelH, panelGap           = 110.0, 14.0
)

// WriteSVG writes the chart as a standalone SVG document.
func (c *Chart) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := &svgPlot{w: bw, c: c}
	p.write()
	return bw.Flush()
}

type svgPlot struct {
	w              *bufio.Writer
	c              *Chart
	x0, x1, y0, y1 float64 // data ranges
	h              float64 // document height
	top, bottom    float64 // the band being drawn
	log            bool    // the band's y axis is on a log scale
}

func (p *svgPlot) printf(format string, args ...any) { fmt.Fprintf(p.w, format, args...) }

func (p *svgPlot) write() {
	c := p.c
	p.ranges()
	panels := c.Panels && len(c.Categories) == 0 && len(c.Series) > 1
	p.h = svgH
	if len(c.Categories) > 0 {
		p.h += 13 * float64(p.labelLines()-1)
	}
	groups := p.panelGroups()
	if panels {
		n := float64(len(groups))
		p.h = plotT + plotB + n*panelH + (n-1)*panelGap
	}
	p.printf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n",
		svgW, p.h, svgW, p.h)
	p.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p.printf(`<text x="%g" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", plotL, esc(c.Title))
	switch {
	case panels:
		for gi, g := range groups {
			if c.PanelY {
				log := c.YLog
				for _, s := range c.Series[g[0]:g[1]] {
					log = log || s.YLog
				}
				p.yRange(c.Series[g[0]:g[1]], log)
			}
			p.top = plotT + float64(gi)*(panelH+panelGap)
			p.bottom = p.top + panelH
			p.yAxis()
			p.vLines(gi == 0)
			for i := g[0]; i < g[1]; i++ {
				p.line(i)
			}
			p.hLines()
			for i := g[0]; i < g[1]; i++ {
				y := (p.top+p.bottom)/2 + 4 + 16*(float64(i-g[0])-float64(g[1]-g[0]-1)/2)
				p.printf(`<text x="%.1f" y="%.1f" fill="%s" font-weight="bold">%s</text>`+"\n",
					svgW-plotR+12, y, chartPalette[i%len(chartPalette)], esc(truncate(c.Series[i].Name, 24)))
			}
		}
		p.xAxis()
	case len(c.Categories) > 0:
		p.top, p.bottom = plotT, p.h-plotB-13*float64(p.labelLines()-1)
		p.yAxis()
		p.xAxis()
		p.bars()
		p.hLines()
		p.legend()
	default:
		p.top, p.bottom = plotT, p.h-plotB
		p.yAxis()
		p.vLines(true)
		p.xAxis()
		for i := range c.Series {
			p.line(i)
		}
		p.hLines()
		p.legend()
	}
	p.printf("</svg>\n")
}

// panelGroups returns the series of each panel, [from, to): one each, with the
// overlays that follow it.
func (p *svgPlot) panelGroups() [][2]int {
	var groups [][2]int
	for i, s := range p.c.Series {
		if s.Overlay && len(groups) > 0 {
			groups[len(groups)-1][1] = i + 1
			continue
		}
		groups = append(groups, [2]int{i, i + 1})
	}
	return groups
}

// labelLines is the most lines a category name wraps to.
func (p *svgPlot) labelLines() int {
	n := 1
	for _, c := range p.c.Categories {
		n = max(n, strings.Count(c, ", ")+1)
	}
	return n
}

func (p *svgPlot) hLines() {
	for _, m := range p.c.HLines {
		y := p.sy(m.At)
		p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="5,4"/>`+"\n", plotL, y, svgW-plotR, y)
		if m.Label != "" {
			p.printf(`<text x="%.1f" y="%.1f" fill="#555" font-size="11">%s</text>`+"\n", svgW-plotR+6, y+4, esc(m.Label))
		}
	}
}

// ranges finds the data ranges and rounds them to tick steps.
func (p *svgPlot) ranges() {
	c := p.c
	p.x0, p.x1 = math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for i := range min(len(s.X), len(s.Y)) {
			p.x0, p.x1 = min(p.x0, s.X[i]), max(p.x1, s.X[i])
		}
	}
	for _, m := range c.VLines {
		p.x0, p.x1 = min(p.x0, m.At), max(p.x1, m.At)
	}
	if math.IsInf(p.x0, 1) || p.x1 <= p.x0 {
		p.x0, p.x1 = 0, 1
	}
	p.yRange(c.Series, c.YLog)
}

// yRange sets the y range of a band drawing series, on a log scale if log.
func (p *svgPlot) yRange(series []Series, log bool) {
	c := p.c
	p.log = log
	p.y0, p.y1 = 0, math.Inf(-1)
	for _, s := range series {
		for i, y := range s.Y {
			if math.IsNaN(y) {
				continue // a gap in a line
			}
			p.y1 = max(p.y1, y)
			p.y0 = min(p.y0, y)
			if i < len(s.High) {
				p.y1 = max(p.y1, s.High[i])
			}
		}
	}
	for _, m := range c.HLines {
		p.y1 = max(p.y1, m.At)
		p.y0 = min(p.y0, m.At)
	}
	if log {
		p.logRange(series)
	}
	if c.YMax > c.YMin && (!log || c.YMin > 0) {
		p.y0, p.y1 = c.YMin, c.YMax
	}
	if log {
		return
	}
	if math.IsInf(p.y1, -1) || p.y1 <= p.y0 {
		p.y1 = p.y0 + 1
	}
	if !(c.YMax > c.YMin) {
		st := niceStep((p.y1 - p.y0) / 5)
		p.y1 = math.Ceil(p.y1/st) * st
		p.y0 = math.Floor(p.y0/st) * st
	}
}

// logRange sets the y range of a log-scale band to whole decades around the positive
// values of series (one decade, 1 to 10, if there are none).
func (p *svgPlot) logRange(series []Series) {
	lo, hi := math.Inf(1), math.Inf(-1)
	see := func(v float64) {
		if v > 0 && !math.IsInf(v, 0) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	for _, s := range series {
		for i, y := range s.Y {
			see(y)
			if i < len(s.Low) {
				see(s.Low[i])
			}
			if i < len(s.High) {
				see(s.High[i])
			}
		}
	}
	for _, m := range p.c.HLines {
		see(m.At)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	p.y0 = math.Pow(10, math.Floor(math.Log10(lo)))
	p.y1 = math.Pow(10, math.Ceil(math.Log10(hi)))
	if p.y1 <= p.y0 {
		p.y1 = p.y0 * 10
	}
}

func (p *svgPlot) sx(x float64) float64 {
	return plotL + (x-p.x0)/(p.x1-p.x0)*(svgW-plotL-plotR)
}

func (p *svgPlot) sy(y float64) float64 {
	if p.log {
		y = max(y, p.y0) // zero and below sit on the floor
		return p.bottom - math.Log10(y/p.y0)/math.Log10(p.y1/p.y0)*(p.bottom-p.top)
	}
	return p.bottom - (y-p.y0)/(p.y1-p.y0)*(p.bottom-p.top)
}

// yAxis draws the grid, the y ticks and the axis lines of the current band.
func (p *svgPlot) yAxis() {
	left, right := plotL, svgW-plotR
	tick := func(v float64, label string) {
		y := p.sy(v)
		p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", left, y, right, y)
		if label != "" {
			p.printf(`<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, label)
		}
	}
	if p.log {
		// Decades, labelled; 2× and 5× lines too when there are few decades.
		decades := int(math.Round(math.Log10(p.y1 / p.y0)))
		for d := 0; d <= decades; d++ {
			v := p.y0 * math.Pow(10, float64(d))
			tick(v, fmtTick(v, min(v, 1)))
			for _, m := range []float64{2, 5} {
				if d < decades && decades <= 4 {
					tick(m*v, "")
				}
			}
		}
	} else {
		st := niceStep((p.y1 - p.y0) / 5)
		if p.bottom-p.top < 150 {
			st = niceStep((p.y1 - p.y0) / 3)
		}
		for v := p.y0; v <= p.y1+st/1e6; v += st {
			tick(v, fmtTick(v, st))
		}
	}
	p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, p.bottom, right, p.bottom)
	p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, p.top, left, p.bottom)
}

// xAxis draws the x ticks (line charts) under the current band and both axis labels.
func (p *svgPlot) xAxis() {
	c := p.c
	left, right := plotL, svgW-plotR
	if len(c.Categories) == 0 {
		sx := niceStep((p.x1 - p.x0) / 8)
		for v := math.Ceil(p.x0/sx) * sx; v <= p.x1+sx/1e6; v += sx {
			x := p.sx(v)
			p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x, p.bottom, x, p.bottom+4)
			p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, p.bottom+17, fmtTick(v, sx))
		}
	}
	p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (left+right)/2, p.h-10, esc(c.XLabel))
	mid := (plotT + p.h - plotB) / 2
	p.printf(`<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`+"\n", mid, mid, esc(c.YLabel))
}

// vLines draws the vertical markers across the current band, labelled if label is set:
// above the band, or, where labels would overlap there, in rows inside its top.
func (p *svgPlot) vLines(label bool) {
	var rows []float64 // the right end of each row's last label
	for _, m := range p.c.VLines {
		x := p.sx(m.At)
		p.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="3,3"/>`+"\n", x, p.top, x, p.bottom)
		if !label || m.Label == "" {
			continue
		}
		w := labelCharW * float64(utf8.RuneCountInString(m.Label))
		row := 0
		for row < len(rows) && x-w/2 < rows[row]+4 {
			row++
		}
		if row == len(rows) {
			rows = append(rows, 0)
		}
		rows[row] = x + w/2
		y := p.top - 3
		if row > 0 {
			y = p.top + 11*float64(row)
		}
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555" font-size="10" stroke="white" stroke-width="3" paint-order="stroke">%s</text>`+"\n",
			x, y, esc(m.Label))
	}
}

// labelCharW is the width of a character of a marker's label (font size 10), roughly.
const labelCharW = 5.5

// line draws series i as a line in the current band, a gap where y is NaN (a step
// holds until the gap's x).
func (p *svgPlot) line(i int) {
	s := p.c.Series[i]
	var b strings.Builder
	drawing := false
	for k := range min(len(s.X), len(s.Y)) {
		x := p.sx(s.X[k])
		if math.IsNaN(s.Y[k]) {
			if drawing && s.Step {
				fmt.Fprintf(&b, " H%.1f", x)
			}
			drawing = false
			continue
		}
		y := p.sy(s.Y[k])
		switch {
		case !drawing && b.Len() > 0:
			fmt.Fprintf(&b, " M%.1f,%.1f", x, y)
		case !drawing:
			fmt.Fprintf(&b, "M%.1f,%.1f", x, y)
		case s.Step:
			fmt.Fprintf(&b, " H%.1f V%.1f", x, y)
		default:
			fmt.Fprintf(&b, " L%.1f,%.1f", x, y)
		}
		drawing = true
	}
	if b.Len() == 0 {
		return
	}
	p.printf(`<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>`+"\n",
		b.String(), chartPalette[i%len(chartPalette)])
}

func (p *svgPlot) bars() {
	c := p.c
	n := len(c.Categories)
	groupW := (svgW - plotL - plotR) / float64(n)
	ns := max(len(c.Series), 1)
	barW := groupW * 0.7 / float64(ns)
	bottom := p.bottom
	for j, cat := range c.Categories {
		gx := plotL + float64(j)*groupW
		// Long category names wrap at ", ", one line each.
		p.printf(`<text x="%.1f" y="%.1f" text-anchor="middle">`, gx+groupW/2, bottom+17)
		for k, part := range strings.Split(cat, ", ") {
			dy := 0.0
			if k > 0 {
				dy = 13
			}
			p.printf(`<tspan x="%.1f" dy="%g">%s</tspan>`, gx+groupW/2, dy, esc(part))
		}
		p.printf("</text>\n")
		for i, s := range c.Series {
			if j >= len(s.Y) {
				continue
			}
			x := gx + groupW*0.15 + float64(i)*barW
			y := p.sy(s.Y[j])
			base := p.sy(max(p.y0, 0))
			p.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				x, min(y, base), barW*0.92, math.Abs(base-y), chartPalette[i%len(chartPalette)],
				esc(s.Name), esc(cat), strconv.FormatFloat(s.Y[j], 'g', 4, 64))
			if j < len(s.Low) && j < len(s.High) {
				cx := x + barW*0.46
				lo, hi := p.sy(s.Low[j]), p.sy(s.High[j])
				p.printf(`<path d="M%.1f,%.1f V%.1f M%.1f,%.1f H%.1f M%.1f,%.1f H%.1f" stroke="#222" stroke-width="1.2"/>`+"\n",
					cx, lo, hi, cx-4, lo, cx+4, cx-4, hi, cx+4)
			}
		}
	}
}

func (p *svgPlot) legend() {
	x := svgW - plotR + 16
	for i, s := range p.c.Series {
		y := plotT + 8 + float64(i)*20
		p.printf(`<rect x="%.1f" y="%.1f" width="14" height="10" fill="%s"/>`+"\n", x, y-9, chartPalette[i%len(chartPalette)])
		p.printf(`<text x="%.1f" y="%.1f">%s</text>`+"\n", x+20, y, esc(truncate(s.Name, 24)))
	}
}

// niceStep rounds a raw tick step to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / e; {
	case f <= 1:
		return e
	case f <= 2:
		return 2 * e
	case f <= 5:
		return 5 * e
	}
	return 10 * e
}

// fmtTick prints a tick value with as many decimals as its step needs.
func fmtTick(v, step float64) string {
	d := 0
	if step < 1 {
		d = int(math.Ceil(-math.Log10(step)))
	}
	if math.Abs(v) < step/1e6 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
