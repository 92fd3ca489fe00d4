package scenario

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/attack"
	"github.com/h3edge/h3edge/bench/chart"
	"github.com/h3edge/h3edge/bench/testkit"
)

// TestAttackTimeline builds the time line and chart of an attack report from known
// samples: the legitimate requests binned by when each was meant to leave, their p99
// and success per sample, the attacker's samples placed by its start, the markers, and
// a chart with the three series and the ban.
func TestAttackTimeline(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	msec := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	legit := &legitSeries{t0: t0}
	for i := 1; i <= 50; i++ { // sample 0: 50 responses of 1…50 ms
		legit.record(t0.Add(msec(4*i)), msec(i), 200)
	}
	for i := 1; i <= 100; i++ { // sample 1: 100 of 1…100 ms (two 503s), 10 failures
		status := 200
		if i <= 2 {
			status = 503
		}
		legit.record(t0.Add(msec(250+2*i)), msec(i), status)
		if i <= 10 {
			legit.record(t0.Add(msec(251+2*i)), 2*time.Second, 0)
		}
	}
	// sample 2: nothing; sample 3: one response
	legit.record(t0.Add(msec(800)), msec(5), 200)
	legit.record(t0.Add(-time.Second), msec(1), 200) // before the run: no sample

	a, err := attack.Lookup("rapid-reset")
	if err != nil {
		t.Fatal(err)
	}
	// The attacker began 10 ms after the attack phase (its process starting): its
	// samples go to samples 1 and 2.
	out := &attack.Outcome{Start: t0.Add(msec(260)), SampleEvery: attackSampleEvery,
		SentPerSample: []int64{100, 50}, OpenPerSample: []int64{2, 1}}
	tl := newAttackTimeline(legit, nil, a, out, t0.Add(msec(250)), msec(500), msec(100))

	near := func(got, want []float64) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-9 {
				return false
			}
		}
		return true
	}
	for _, c := range []struct {
		name      string
		got, want []float64
	}{
		{"start_seconds", tl.StartSec, []float64{0, 0.25, 0.5, 0.75}},
		{"legit_p99_ms", tl.LegitP99ms, []float64{50, 99, 0, 5}},
		{"legit_success", tl.LegitSuccess, []float64{1, 98.0 / 110, 0, 1}},
		{"attacker_sent_per_second", tl.AttackerPerSecond, []float64{0, 400, 200, 0}},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !slices.Equal(tl.LegitRequests, []int64{50, 110, 0, 1}) || !slices.Equal(tl.AttackerOpen, []int64{0, 2, 1, 0}) {
		t.Errorf("legit_requests %v, attacker_open %v", tl.LegitRequests, tl.AttackerOpen)
	}
	if tl.AttackStartSec != 0.25 || math.Abs(tl.FirstBanSec-0.35) > 1e-9 || math.Abs(tl.AttackEndSec-0.76) > 1e-9 ||
		tl.AttackerUnit != "streams" || tl.IntervalMs != 250 || tl.ControlP99ms != nil {
		t.Errorf("markers %v / %v / %v, unit %q, interval %d ms, control %v", tl.AttackStartSec, tl.FirstBanSec, tl.AttackEndSec,
			tl.AttackerUnit, tl.IntervalMs, tl.ControlP99ms)
	}
	b, err := json.Marshal(tl)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"legit_p99_ms":[50,99,0,5]`, `"attacker_sent_per_second":[0,400,200,0]`, `"first_ban_at_seconds":0.35`} {
		if !bytes.Contains(b, []byte(field)) {
			t.Errorf("JSON lacks %s: %s", field, b)
		}
	}

	c := attackChart(a.Name, tl)
	names := []string{}
	for _, s := range c.Series {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"legit p99 ms", "legit ok %", "attacker streams/s"}) || !c.Panels || !c.PanelY {
		t.Fatalf("series %q, panels %v / own y %v", names, c.Panels, c.PanelY)
	}
	if p99 := c.Series[0]; len(p99.Y) != 4 || p99.Y[1] != 99 || !math.IsNaN(p99.Y[2]) || !p99.YLog {
		t.Errorf("p99 series %v (log %v), want 99 ms in sample 1 and a gap in sample 2", p99.Y, p99.YLog)
	}
	if !slices.Equal(c.Series[2].Y, tl.AttackerPerSecond) {
		t.Errorf("attacker series %v", c.Series[2].Y)
	}
	want := []chart.Marker{{At: 0.25, Label: "attack"}, {At: tl.FirstBanSec, Label: "first ban +0.10s"}, {At: tl.AttackEndSec, Label: "attack ends"}}
	if !slices.Equal(c.VLines, want) {
		t.Errorf("markers %v, want %v", c.VLines, want)
	}
	var svg bytes.Buffer
	if err := c.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	testkit.CheckSVG(t, svg.Bytes())
	for _, w := range []string{">first ban +0.10s<", ">attacker streams/s<", ">legit p99 ms<"} {
		if !strings.Contains(svg.String(), w) {
			t.Errorf("SVG lacks %q", w)
		}
	}
	if strings.Contains(svg.String(), "NaN") {
		t.Error("NaN in the SVG")
	}

	// Full mode: the control's p99 drawn over the attacked one's, in its panel, a gap
	// where it had no response.
	ctl := &legitSeries{t0: t0}
	ctl.record(t0.Add(msec(10)), msec(3), 200)
	tl = newAttackTimeline(legit, ctl, a, out, t0.Add(msec(250)), msec(500), msec(100))
	c = attackChart(a.Name, tl)
	if !slices.Equal(tl.ControlP99ms, []float64{3, 0, 0, 0}) || len(c.Series) != 4 {
		t.Fatalf("control_p99_ms %v, %d series", tl.ControlP99ms, len(c.Series))
	}
	if s := c.Series[1]; s.Name != "control p99 ms" || !s.Overlay || s.Y[0] != 3 || !math.IsNaN(s.Y[1]) {
		t.Errorf("control series %q (overlay %v): %v", s.Name, s.Overlay, s.Y)
	}

	// No ban: no ban marker, first_ban_at_seconds -1.
	tl = newAttackTimeline(legit, nil, a, out, t0.Add(msec(250)), msec(500), -1)
	if c := attackChart(a.Name, tl); tl.FirstBanSec != -1 || len(c.VLines) != 2 {
		t.Errorf("without a ban: first ban at %v, markers %v", tl.FirstBanSec, c.VLines)
	}
}
