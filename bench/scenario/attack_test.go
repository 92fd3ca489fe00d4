package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/chart"
	"github.com/h3edge/h3edge/bench/testkit"
)

// TestAttacks runs every attack in short mode against a real h3edge on loopback and
// asserts its functional outcome (RunAttack's checks: h3edge alive and serving the
// legitimate clients, the attacker banned, its connections ended in time, the 408,
// memory within 4× idle) and that its report has its chart. The attacker runs in this
// process: short mode asserts no latency figure.
func TestAttacks(t *testing.T) {
	for _, name := range AttackNames() {
		t.Run(name, func(t *testing.T) {
			opt := scenarioOptions(t)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			rep, err := RunAttack(ctx, name, opt)
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			rep.WriteText(&text)
			t.Logf("\n%s", text.String())
			if !rep.Holds {
				t.Errorf("claim does not hold: %s", rep.Verdict)
			}
			if b, err := json.Marshal(rep); err != nil || !json.Valid(b) {
				t.Errorf("JSON: %v %s", err, b)
			}
			checkAttackChart(t, rep)
		})
	}
}

// checkAttackChart asserts an attack report's chart: the legitimate p99 and success
// and the attacker's rate each have a positive point, the first ban is marked when a
// source was banned, and the SVG is well-formed.
func checkAttackChart(t *testing.T, rep *Report) {
	t.Helper()
	f, ok := rep.Figures.(attackFigures)
	if !ok || f.Timeline == nil || rep.Chart == nil {
		t.Fatalf("figures %T, timeline %v, chart %v", rep.Figures, ok && f.Timeline != nil, rep.Chart != nil)
	}
	c := rep.Chart
	if len(c.Series) != 3 { // short mode has no control
		t.Fatalf("%d series, want 3", len(c.Series))
	}
	for _, s := range c.Series {
		if len(s.X) != len(f.Timeline.StartSec) || !slices.ContainsFunc(s.Y, func(y float64) bool { return y > 0 }) {
			t.Errorf("series %q: %d points of %d samples, none positive: %v", s.Name, len(s.X), len(f.Timeline.StartSec), s.Y)
		}
	}
	banMarked := slices.ContainsFunc(c.VLines, func(m chart.Marker) bool { return strings.HasPrefix(m.Label, "first ban") })
	if banMarked != (f.Banned > 0) {
		t.Errorf("%d sources banned, ban marked %v: %v", f.Banned, banMarked, c.VLines)
	}
	var svg bytes.Buffer
	if err := c.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	testkit.CheckSVG(t, svg.Bytes())
}
