package scenario

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/testkit"
)

// TestProxyScenario runs the proxy scenario's short mode. Its claim (CPU ratios, a
// loose 4× bound against the demo origin in short mode) is asserted with
// H3EDGE_PERF=1 only; every run asserts what a loaded machine still gets right: every
// server on every protocol it speaks answered 200s without errors, through the
// origin when proxied (nginx and HAProxy too when installed), and the report carries
// a CPU figure per cell, the ratios, JSON and a chart.
func TestProxyScenario(t *testing.T) {
	opt := scenarioOptions(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, "proxy", opt)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	if perfClaims() {
		if !rep.Holds {
			t.Errorf("claim does not hold: %s", rep.Verdict)
		}
		if d := time.Since(start); d > 12*time.Second {
			t.Errorf("short mode took %v, want at most 10 s (plus the build)", d)
		}
	}
	fig := rep.Figures.(*proxyFigures)
	want := map[string][]bench.Proto{proxyEdge: {bench.H3, bench.H2, bench.H1}, proxyDemo: {bench.H3, bench.H2, bench.H1}}
	for _, name := range []string{proxyNgx, proxyHAP} {
		if _, err := exec.LookPath(name); err == nil || fileExists("/usr/sbin/"+name) {
			want[name] = []bench.Proto{bench.H2, bench.H1}
		} else {
			t.Logf("%s not installed: not measured", name)
		}
	}
	cells := map[string]proxyCell{}
	for _, c := range fig.Cells {
		cells[c.Server+"|"+string(c.Proto)] = c
	}
	for name, protos := range want {
		for _, p := range protos {
			c, ok := cells[name+"|"+string(p)]
			if !ok || !(c.CPUMedian > 0) || !(c.RPSMedian > 0) {
				t.Errorf("%s %s: no figures (%+v)", name, p, c)
			}
		}
	}
	// The proxies reached the origin; the demo origin did not (10 ms CPU ticks: a
	// proxied run of some thousand requests moves the origin's counter).
	for _, r := range fig.Runs {
		if r.Errors > 0 || r.Non200 > 0 {
			t.Errorf("%s %s round %d: %d errors, %d answers not 200", r.Server, r.Proto, r.Round, r.Errors, r.Non200)
		}
		switch {
		case r.Server == proxyDemo && r.OriginCPUPerRequestUs > 1:
			t.Errorf("demo %s: the origin worked %.1f µs per request", r.Proto, r.OriginCPUPerRequestUs)
		case r.Server != proxyDemo && !(r.OriginCPUPerRequestUs > 0):
			t.Errorf("%s %s: the origin did no work", r.Server, r.Proto)
		}
	}
	for _, k := range []string{"h3 proxied/demo", "h2 proxied/demo", "h1 proxied/demo"} {
		if !(fig.Ratios[k] > 0) {
			t.Errorf("ratio %s missing: %v", k, fig.Ratios)
		}
	}
	b, err := json.Marshal(rep)
	if err != nil || !json.Valid(b) {
		t.Errorf("JSON: %v", err)
	}
	if rep.Chart == nil {
		t.Fatal("no chart")
	}
	var svg strings.Builder
	if err := rep.Chart.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	testkit.CheckSVG(t, []byte(svg.String()))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
