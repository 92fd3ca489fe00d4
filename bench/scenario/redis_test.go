package scenario

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
)

// The Redis scenarios in short mode, against real processes: h3edge (built from this
// module or $H3EDGE) and redis-server, which they start on free loopback ports. Without
// redis-server or redis-cli they skip, or fail under CI=true.

// redisScenario runs the named scenario in short mode and checks what every scenario
// report must have.
func redisScenario(t *testing.T, name string) *Report {
	t.Helper()
	testkit.Need(t, "redis-server")
	testkit.Need(t, "redis-cli")
	return shortScenario(t, name)
}

// TestAccuracyScenario checks the accuracy claim figure by figure: on one Redis node
// and on a 3-node cluster, the exact algorithms admitted exactly what they allow in
// every window, sliding_window stayed under Q per aligned window and under 2Q in any
// window span, the lease over-admitted at most lease × edges, and Redis kept no key
// without an expiry or with the raw API key.
func TestAccuracyScenario(t *testing.T) {
	rep := redisScenario(t, "accuracy")
	fig, ok := rep.Figures.(*accuracyFigures)
	if !ok {
		t.Fatalf("figures %T", rep.Figures)
	}
	if len(fig.Passes) != 2 {
		t.Fatalf("%d passes, want single node and cluster", len(fig.Passes))
	}
	q := int(fig.Quota)
	for _, ps := range fig.Passes {
		if len(ps.Policies) != len(accuracyPolicies) {
			t.Errorf("%s: %d policies", ps.Store, len(ps.Policies))
		}
		if ps.Keys == 0 || len(ps.KeysNoTTL) > 0 || len(ps.KeysRaw) > 0 {
			t.Errorf("%s: %d keys, without expiry %v, with the raw API key %v", ps.Store, ps.Keys, ps.KeysNoTTL, ps.KeysRaw)
		}
		for _, a := range ps.Policies {
			if len(a.PerWindow) != fig.Windows {
				t.Errorf("%s %s: %d windows", ps.Store, a.Policy, len(a.PerWindow))
			}
			if a.StoreFailed > 0 || a.Other > 0 {
				t.Errorf("%s %s: %d store failures, %d other", ps.Store, a.Policy, a.StoreFailed, a.Other)
			}
			// Demand must have exceeded the quota, or exactness proves nothing.
			if a.Denied < 2*a.Admitted {
				t.Errorf("%s %s: %d denied for %d admitted: demand not far above the quota", ps.Store, a.Policy, a.Denied, a.Admitted)
			}
			switch {
			case a.Lease > 0:
				if a.Over > int(a.Lease)*fig.Edges {
					t.Errorf("%s lease: over-admitted %d, bound %d", ps.Store, a.Over, int(a.Lease)*fig.Edges)
				}
			case a.Carried:
				// Exact only with the bucket's start elsewhere in the span of the first
				// admission's send and answer, or with a refill taken just after the
				// edge it fell before (bucketFits): the counts were placed there.
				if !a.Holds {
					t.Errorf("%s %s: per window %v: %s", ps.Store, a.Policy, a.PerWindow, a.Why)
				}
			case a.Algorithm == "sliding_window":
				if slices.Max(a.PerWindow) > q || a.PeakSpan > 2*q-1 {
					t.Errorf("%s sliding_window: per window %v, peak %d in a span (Q %d, bound %d)", ps.Store, a.PerWindow, a.PeakSpan, q, 2*q-1)
				}
			default:
				// Exact in every window. Counted by response time a window may be off by
				// the admissions that were sent before its edge and answered after it:
				// the client cannot tell on which side Redis decided them, and the
				// scenario holds only if they can be placed so that every window is
				// exact (placeable). The total is exact but for admissions answered
				// after the last window (Late), which may have been decided in it.
				if a.TotalOver > 0 || -a.TotalOver > a.Late {
					t.Errorf("%s %s: admitted %v in all, %d off %v (%d answered after the last window)", ps.Store, a.Policy, a.PerWindow, a.TotalOver, a.Expected, a.Late)
				}
				for k, n := range a.PerWindow {
					if d := n - a.Expected[k]; d != 0 && (!a.Holds || abs(d) > a.Straddling) {
						t.Errorf("%s %s: window %d admitted %d, exactly %d allowed (%d straddled an edge)", ps.Store, a.Policy, k, n, a.Expected[k], a.Straddling)
					}
				}
			}
		}
	}
}

// TestOutageScenario checks the outage claim: every check the scenario made held,
// with the figures behind the main ones checked here again. The checks about timing
// (the p99 bound, recovery within 2 s, closed-mode decisions within their budget)
// are asserted only with H3EDGE_PERF=1; in every run the closed policy must admit
// again on every edge once Redis is back.
func TestOutageScenario(t *testing.T) {
	rep := redisScenario(t, "outage")
	fig, ok := rep.Figures.(*outageFigures)
	if !ok {
		t.Fatalf("figures %T", rep.Figures)
	}
	if len(fig.Checks) < 20 {
		t.Errorf("%d checks", len(fig.Checks))
	}
	var timing int
	for _, c := range fig.Checks {
		switch {
		case c.Holds:
		case c.timing && !perfClaims():
			t.Logf("timing check does not hold on this machine (asserted with H3EDGE_PERF=1): %s: %s", c.What, c.Got)
		default:
			t.Errorf("%s: %s", c.What, c.Got)
		}
		if c.timing {
			timing++
		}
	}
	// Six p99s, two recoveries, the closed-mode 503s outside the outages.
	if timing != 9 {
		t.Errorf("%d checks marked timing, want 9", timing)
	}
	if len(fig.Phases) != 5 {
		t.Fatalf("%d phases", len(fig.Phases))
	}
	// Once Redis answers again, each edge's closed policy (which only Redis admits)
	// admits again: the breaker closed.
	for _, pi := range []int{stageRestarted, stageContinued} {
		if closed := fig.Phases[pi].Modes[1]; slices.Contains(closed.PerEdge, 0) {
			t.Errorf("%s: closed admitted %v per edge: an edge never decided in Redis again", fig.Phases[pi].Phase, closed.PerEdge)
		}
	}
	if perfClaims() {
		for i, d := range fig.RecoveryMs {
			if d > outageRecovery.Milliseconds() {
				t.Errorf("recovery %d took %d ms", i, d)
			}
		}
	}
	bound := int64(fig.LatencyBoundMs * 1000)
	for _, pi := range outageOutages {
		for _, m := range fig.Phases[pi].Modes {
			if m.P99us > bound && perfClaims() {
				t.Errorf("%s %s: p99 %d µs above %d µs", fig.Phases[pi].Phase, m.Mode, m.P99us, bound)
			}
			if m.Failed > 0 || m.Other5xx > 0 {
				t.Errorf("%s %s: %d failed, %d other 5xx", fig.Phases[pi].Phase, m.Mode, m.Failed, m.Other5xx)
			}
			switch m.Mode {
			case "closed":
				if m.OK > 0 || m.Reduced == 0 {
					t.Errorf("%s closed: %d admitted, %d 503s with the problem", fig.Phases[pi].Phase, m.OK, m.Reduced)
				}
			case "open", "local":
				// Both edges kept admitting on their own.
				for ei, n := range m.PerEdge {
					if n == 0 {
						t.Errorf("%s %s: edge %d admitted nothing", fig.Phases[pi].Phase, m.Mode, ei+1)
					}
				}
			}
		}
	}
	// local admits about half of what open admits (quota ÷ 2 against the full quota
	// per edge).
	for _, pi := range outageOutages {
		open, local := fig.Phases[pi].Modes[0], fig.Phases[pi].Modes[2]
		if r := float64(local.OK) / float64(max(open.OK, 1)); r < 0.35 || r > 0.65 {
			t.Errorf("%s: local admitted %d, open %d (ratio %.2f, want about 0.5)", fig.Phases[pi].Phase, local.OK, open.OK, r)
		}
	}
}

func TestPlaceable(t *testing.T) {
	for _, tc := range []struct {
		sure, amb, exp []int
		want           bool
	}{
		{[]int{10, 10}, []int{0, 0}, []int{10, 10}, true},
		{[]int{10, 9}, []int{0, 0}, []int{10, 10}, false},
		// One admission answered in window 1 but sent in window 0: it fits either.
		{[]int{9, 10}, []int{1, 0}, []int{10, 10}, true},
		{[]int{10, 9}, []int{1, 0}, []int{10, 10}, true},
		{[]int{10, 10}, []int{1, 0}, []int{10, 10}, false},
		// Straddling the end of the last window: it may belong to it or not.
		{[]int{10, 9}, []int{0, 1}, []int{10, 10}, true},
		{[]int{10, 10}, []int{0, 1}, []int{10, 10}, true},
		{[]int{11, 10}, []int{0, 0}, []int{10, 10}, false},
	} {
		if got := placeable(tc.sure, tc.amb, tc.exp); got != tc.want {
			t.Errorf("placeable(%v, %v, %v) = %v", tc.sure, tc.amb, tc.exp, got)
		}
	}
}

func TestBreakerLog(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	out := `time=2026-01-02T03:04:06.500Z level=WARN msg="quota store circuit open" component=edge from=closed
time=2026-01-02T03:04:06.501Z level=WARN msg="circuit breaker open: redis is failing" component=edge
time=2026-01-02T03:04:08.250Z level=WARN msg="quota store circuit closed" component=edge from=open
`
	got := strings.Join(breakerLog(out, start), ", ")
	if want := "open at +1.500s, closed at +3.250s"; got != want {
		t.Errorf("breakerLog = %q, want %q", got, want)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestAccuracyTokenBucketEdges: the accuracy check of a token bucket allows what the
// client cannot rule out — a first admission anywhere between its request's send and
// its answer, and a refill just before an edge taken just after it (when no admission
// was surely decided between the two) — and no more.
func TestAccuracyTokenBucketEdges(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	par := accuracyParams{quota: 20, window: time.Second, windows: 2}
	pol := accuracyPolicy{"token_bucket", "token_bucket", 0}
	// run builds n0 admissions in window 0, the first sent at first[0] ms and answered
	// at first[1], the others spread up to 995 ms, and n1 in window 1 spread from 1 005
	// to 1 995 ms, each answered 2 ms after it was sent: demand up to each edge, as
	// the scenario's.
	run := func(first [2]int, n0, n1 int) accuracyAlgo {
		recs := []fleetRecord{{code: 200, sent: ms(first[0]), recv: ms(first[1])}}
		spread := func(n, from, to int) {
			for i := range n {
				at := to
				if n > 1 {
					at = from + i*(to-from)/(n-1)
				}
				recs = append(recs, fleetRecord{code: 200, sent: ms(at), recv: ms(at + 2)})
			}
		}
		spread(n0-1, first[1]+5, 995)
		spread(n1, 1005, 1995)
		return accuracyStats(recs, 0, pol, base, par, 3)
	}
	for _, tc := range []struct {
		name   string
		first  [2]int
		n0, n1 int
		holds  bool
	}{
		// Sent at 20 ms, answered at 60: the bucket began between, so the first
		// window holds 20 + 19 (a start before 50 ms) or 20 + 18 (after).
		{"first window 39", [2]int{20, 60}, 39, 20, true},
		{"first window 38", [2]int{20, 60}, 38, 20, true},
		{"first window 37", [2]int{20, 60}, 37, 20, false},
		{"first window 40", [2]int{20, 60}, 40, 20, false},
		// A start between 45 and 50 ms puts a refill between the last admission before
		// an edge (sent at 995 ms or 1 995) and the edge: taken after it.
		{"refill taken after the edge", [2]int{20, 60}, 38, 21, true},
		{"last refill taken after the end", [2]int{20, 60}, 39, 19, true},
		{"one too many", [2]int{20, 60}, 39, 21, false},
		{"one too few", [2]int{20, 60}, 39, 18, false},
		{"two moved", [2]int{20, 60}, 37, 21, false},
		// Sent at 25 ms and answered at 27: the refills fall 22–25 ms before each edge,
		// before the last admission of the window: none can be taken after the edge.
		{"narrow start", [2]int{25, 27}, 39, 20, true},
		{"narrow start, refill after the edge", [2]int{25, 27}, 38, 21, false},
		{"narrow start, last window short", [2]int{25, 27}, 39, 19, false},
	} {
		a := run(tc.first, tc.n0, tc.n1)
		if a.Holds != tc.holds {
			t.Errorf("%s: holds %v, want %v (%s)", tc.name, a.Holds, tc.holds, a.Why)
		}
	}
}
