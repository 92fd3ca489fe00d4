package chart

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/h3edge/h3edge/bench/testkit"
)

func TestChartSVG(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chart Chart
		want  []string // substrings of the document
	}{
		{
			name: "lines",
			chart: Chart{
				Title: `a <title> & "quotes"`, XLabel: "s", YLabel: "n",
				Series: []Series{
					{Name: "one", X: []float64{0, 1, 2}, Y: []float64{1, 3, 2}},
					{Name: "two", X: []float64{0, 1, 2}, Y: []float64{0, 5, 1}, Step: true},
				},
				VLines: []Marker{{At: 1.5, Label: "boundary"}},
				HLines: []Marker{{At: 4, Label: "limit"}},
			},
			want: []string{"a &lt;title&gt; &amp; &#34;quotes&#34;", ">one<", ">two<", "boundary", "limit", " H", "stroke-dasharray"},
		},
		{
			name: "panels",
			chart: Chart{
				Title: "panels", Panels: true,
				Series: []Series{
					{Name: "fixed", X: []float64{0, 1}, Y: []float64{20, 0}, Step: true},
					{Name: "sliding", X: []float64{0, 1}, Y: []float64{1, 1}, Step: true},
				},
			},
			want: []string{`height="318"`, ">fixed<", ">sliding<"},
		},
		{
			name: "panels with their own y ranges",
			chart: Chart{
				Title: "own ranges", Panels: true, PanelY: true,
				Series: []Series{
					{Name: "p99 ms", X: []float64{0, 1, 2}, Y: []float64{1, 100, 2}, Step: true, YLog: true},
					{Name: "frames/s", X: []float64{0, 1, 2}, Y: []float64{0, 50000, 0}, Step: true},
				},
			},
			// A shared linear range (0–50 000) would tick neither 10 nor 100.
			want: []string{">1<", ">10<", ">100<", ">40000<", ">p99 ms<", ">frames/s<"},
		},
		{
			name: "an overlay in a panel",
			chart: Chart{
				Panels: true, PanelY: true,
				Series: []Series{
					{Name: "attacked", X: []float64{0, 1}, Y: []float64{1, 2}},
					{Name: "control", X: []float64{0, 1}, Y: []float64{1, 300}, Overlay: true},
					{Name: "rate", X: []float64{0, 1}, Y: []float64{5, 0}},
				},
			},
			// Two panels (36 + 48 + 2 × 110 + 14 high); the first's range reaches the
			// overlay's 300.
			want: []string{`height="318"`, ">attacked<", ">control<", ">rate<", ">300<"},
		},
		{
			name: "a gap in a line",
			chart: Chart{
				Series: []Series{
					{Name: "steps", X: []float64{0, 1, 2, 3}, Y: []float64{1, math.NaN(), 3, 4}, Step: true},
					{Name: "line", X: []float64{0, 1, 2}, Y: []float64{math.NaN(), 2, 1}},
				},
			},
			// The step holds until the gap (x 1: 232.7) and starts again after it (x 2:
			// 401.3), the line starts after its own.
			want: []string{` H232.7 M401.3,`, `d="M232.7,`},
		},
		{
			name: "bars with whiskers",
			chart: Chart{
				Title: "bars", Categories: []string{"h3", "h2"},
				Series: []Series{{Name: "ratio", Y: []float64{0.9, 1.1}, Low: []float64{0.8, 1}, High: []float64{1, 1.2}}},
				HLines: []Marker{{At: 0.9}},
			},
			want: []string{">h3<", ">h2<", "<rect", "<title>ratio h3: 0.9</title>"},
		},
		{
			name: "log bars",
			chart: Chart{
				Title: "log", Categories: []string{"datagram", "429"}, YLog: true,
				Series: []Series{{Name: "µs", Y: []float64{0.4, 35}, Low: []float64{0.3, 30}, High: []float64{0.5, 40}}},
				HLines: []Marker{{At: 0.7, Label: "÷ 50"}},
			},
			want: []string{">0.1<", ">1<", ">10<", ">100<", "<title>µs datagram: 0.4</title>", "÷ 50"},
		},
		{
			name:  "log, nothing positive",
			chart: Chart{Categories: []string{"a"}, YLog: true, Series: []Series{{Name: "zero", Y: []float64{0}}}},
			want:  []string{">1<", ">10<"},
		},
		{
			name:  "empty",
			chart: Chart{Title: "nothing"},
			want:  []string{"nothing"},
		},
		{
			name: "odd values",
			chart: Chart{
				Series: []Series{{Name: "flat", X: []float64{5, 5}, Y: []float64{-3, -3}}},
			},
			want: []string{">flat<"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.chart.WriteSVG(&b); err != nil {
				t.Fatal(err)
			}
			testkit.CheckSVG(t, b.Bytes())
			s := b.String()
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("missing %q in\n%s", w, s)
				}
			}
			if strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
				t.Errorf("non-finite coordinates in\n%s", s)
			}
		})
	}
}

// TestMarkerLabels: labels of markers too close to share the row above the plot go
// to rows inside its top, one below the other; a lone one stays above.
func TestMarkerLabels(t *testing.T) {
	c := Chart{
		Series: []Series{{Name: "a", X: []float64{0, 20}, Y: []float64{1, 1}}},
		VLines: []Marker{{At: 3, Label: "attack start"}, {At: 3.1, Label: "first ban"}, {At: 3.2, Label: "third"}, {At: 18, Label: "attack end"}},
	}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	testkit.CheckSVG(t, b.Bytes())
	y := map[string]string{}
	for _, m := range regexp.MustCompile(`<text x="[0-9.]+" y="([0-9.]+)"[^>]*>([a-z ]+)</text>`).FindAllStringSubmatch(b.String(), -1) {
		y[m[2]] = m[1]
	}
	above := fmt.Sprintf("%.1f", plotT-3)
	if y["attack start"] != above || y["attack end"] != above {
		t.Errorf("lone labels at y %q and %q, want %s above the plot", y["attack start"], y["attack end"], above)
	}
	if y["first ban"] == "" || y["third"] == "" || y["first ban"] == above || y["third"] == y["first ban"] || y["third"] == above {
		t.Errorf("crowded labels at y %q, %q (the first at %q): want each in a row of its own", y["first ban"], y["third"], y["attack start"])
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ raw, want float64 }{
		{0.7, 1}, {1, 1}, {1.3, 2}, {3, 5}, {7, 10}, {0.013, 0.02}, {450, 500}, {0, 1}, {math.Inf(1), 1},
	} {
		if got := niceStep(tc.raw); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("niceStep(%g) = %g, want %g", tc.raw, got, tc.want)
		}
	}
	if got := fmtTick(0.30000000000000004, 0.1); got != "0.3" {
		t.Errorf("fmtTick = %q", got)
	}
}
