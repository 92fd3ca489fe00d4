package scenario

import (
	"fmt"
	"strings"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
)

// proxyReport judges the medians by the claim's bounds and writes table, chart and
// figures.
func proxyReport(sched proxySchedule, m *proxyMeasured, order, notes []string) *Report {
	rep := &Report{Holds: true}
	fig := &proxyFigures{Ratios: map[string]float64{}, Runs: m.runs, Loads: map[bench.Proto]string{}}
	rep.Table = [][]string{{"proto"}}
	for _, name := range order {
		rep.Table[0] = append(rep.Table[0], name+" CPU/req", name+" req/s")
	}
	rep.Table[0] = append(rep.Table[0], "proxied÷demo", "proxied÷nginx", "proxied÷haproxy")
	check := func(what string, v, bound float64) {
		c := proxyCheck{What: what, Value: v, Bound: bound, Holds: v > 0 && v <= bound}
		fig.Checks = append(fig.Checks, c)
		rep.Holds = rep.Holds && c.Holds
	}
	ratio := func(p bench.Proto, other string) float64 {
		a, b := m.cell(proxyEdge, p), m.cell(other, p)
		if a == nil || b == nil || b.CPUMedian == 0 {
			return 0
		}
		r := a.CPUMedian / b.CPUMedian
		fig.Ratios[fmt.Sprintf("%s proxied/%s", p, strings.TrimPrefix(other, "h3edge "))] = r
		return r
	}
	ch := &chart.Chart{
		Title:  "CPU per proxied request (median of interleaved rounds)",
		XLabel: "protocol",
		YLabel: "µs CPU per request",
	}
	series := map[string]*chart.Series{}
	for _, name := range order {
		series[name] = &chart.Series{Name: name}
	}
	for _, load := range baselineLoads {
		p := load.proto
		fig.Loads[p] = fmt.Sprintf("%d connections × %d streams", load.conns, load.streams)
		row := []string{string(p)}
		ch.Categories = append(ch.Categories, string(p))
		for _, name := range order {
			c := m.cell(name, p)
			s := series[name]
			if c == nil {
				row = append(row, "–", "–")
				s.Y = append(s.Y, 0)
				continue
			}
			fig.Cells = append(fig.Cells, *c)
			row = append(row, fmt.Sprintf("%.1f µs", c.CPUMedian), fmt.Sprintf("%.0f", c.RPSMedian))
			s.Y = append(s.Y, c.CPUMedian)
		}
		rd, rn, rh := ratio(p, proxyDemo), ratio(p, proxyNgx), ratio(p, proxyHAP)
		for _, r := range []float64{rd, rn, rh} {
			if r == 0 {
				row = append(row, "–")
			} else {
				row = append(row, fmt.Sprintf("%.2f", r))
			}
		}
		rep.Table = append(rep.Table, row)
		if sched.short {
			if p != bench.H1 {
				check(fmt.Sprintf("%s proxied÷demo", p), rd, proxyShortBound)
			}
			continue
		}
		switch p {
		case bench.H3:
			check("h3 proxied÷demo", rd, proxyDemoBound)
			if c := m.cell(proxyEdge, p); c != nil {
				check("h3 proxied µs", c.CPUMedian, proxyH3BoundUs)
			}
		case bench.H2:
			check("h2 proxied÷demo", rd, proxyDemoBound)
			if rn > 0 {
				check("h2 proxied÷nginx", rn, proxyNginxH2Bound)
			}
		case bench.H1:
			if rn > 0 {
				check("h1 proxied÷nginx", rn, proxyNginxH1Bound)
			}
		}
	}
	for _, name := range order {
		ch.Series = append(ch.Series, *series[name])
	}
	var bad []string
	for _, r := range m.runs {
		if r.Errors > 0 || r.Non200 > 0 {
			bad = append(bad, fmt.Sprintf("%s %s round %d: %d errors, %d not 200", r.Server, r.Proto, r.Round, r.Errors, r.Non200))
		}
	}
	if len(bad) > 0 {
		rep.Holds = false
		notes = append(notes, bad...)
	}
	rep.Notes = append([]string{fmt.Sprintf("%d interleaved round(s), order rotated per round, %v warm-up + %v per run; GET /api/x, loads as baseline (h3/h2 16×16, h1 64 connections); servers and origin on CPU 0 when pinned; CPU = the proxy process's utime+stime from /proc ÷ requests", sched.rounds, sched.warm, sched.dur)}, notes...)
	var vs []string
	for _, c := range fig.Checks {
		vs = append(vs, fmt.Sprintf("%s %.2f (≤ %.1f%s)", c.What, c.Value, c.Bound, map[bool]string{true: "", false: " FAILS"}[c.Holds]))
	}
	rep.Verdict = strings.Join(vs, "; ")
	rep.Chart = ch
	rep.Figures = fig
	return rep
}
