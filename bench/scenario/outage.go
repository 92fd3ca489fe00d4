package scenario

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
)

const claimOutage = "with Redis SIGKILLed and restarted mid-run, then SIGSTOPped and continued, under steady load: during each outage the client-side p99 stays within redis.timeout + 5 ms; on_store_failure open admits, within its local backstop (the same quota per edge); closed answers 503 with a temporary-reduced-capacity problem; local applies quota ÷ fleet size per edge; no other 5xx, no failed request, no panic; once Redis is back, exact global limiting resumes within 2 s"

// The outage scenario: two edges share one Redis; three token-bucket policies on
// separate paths differ only in on_store_failure.
const (
	outageEdges   = 2
	outageQuota   = 40 // per outageWindow, global
	outageWindow  = time.Second
	outageRate    = 200 // requests per second per path, over both edges: 5× the quota
	outageTimeout = 10 * time.Millisecond
	outageAllow   = 5 * time.Millisecond // latency allowance over redis.timeout
	outageSources = "127.0.1.2-127.0.1.9"
	outageStreams = 8
	outageKey     = "h3bench-outage-key"
	outageSecret  = "h3bench-outage-secret"
	outageBin     = 100 * time.Millisecond
	// outageSlack absorbs the client's view of time in the admission counts: a
	// response seen just after an instant may have been decided just before it.
	outageSlack = 2
	// outageSettle is how long after recovery a fresh bucket's burst has passed (its Q
	// tokens go in Q ÷ demand = 0.2 s), after which admissions follow the refill rate.
	outageSettle = 500 * time.Millisecond
	// outageRecovery is the claim's bound on the time from Redis answering again to
	// exact limiting on every edge.
	outageRecovery = 2 * time.Second
	// outageGuard keeps requests already in flight when an outage begins out of the
	// outage's checks.
	outageGuard = 5 * time.Millisecond
)

var outageModes = []string{"open", "closed", "local"}

// outageTimes are the phase lengths: before the kill, killed, restarted, stopped,
// continued.
type outageTimes struct{ before, killed, restarted, stopped, continued time.Duration }

// The outages last no whole number of the breaker's 250 ms probe period, so that a
// probe does not land on the restart by construction.
var (
	outageFull  = outageTimes{4 * time.Second, 5130 * time.Millisecond, 6 * time.Second, 5130 * time.Millisecond, 6 * time.Second}
	outageShort = outageTimes{1300 * time.Millisecond, 1630 * time.Millisecond, 2200 * time.Millisecond, 1130 * time.Millisecond, 2200 * time.Millisecond}
)

// outageMode is one failure mode's figures in one phase.
type outageMode struct {
	Mode     string `json:"mode"`
	Requests int    `json:"requests"`
	OK       int    `json:"ok_200"`
	Denied   int    `json:"denied_429"`
	// Reduced counts 503s carrying the temporary-reduced-capacity problem and
	// Retry-After; Other5xx every other 5xx; Failed the requests that got no response.
	Reduced  int `json:"reduced_503"`
	Other5xx int `json:"other_5xx"`
	Failed   int `json:"failed"`
	// Latency of responses intended to leave in the phase, from the intended send time.
	P50us int64 `json:"p50_us"`
	P99us int64 `json:"p99_us"`
	Maxus int64 `json:"max_us"`
	// PerEdge counts admissions per edge (by response time within the phase).
	PerEdge []int `json:"admitted_per_edge"`
}

// outagePhase is one phase of the run.
type outagePhase struct {
	Phase string       `json:"phase"`
	From  float64      `json:"from_s"`
	To    float64      `json:"to_s"`
	Modes []outageMode `json:"modes"`
}

// outageCheck is one checked promise.
type outageCheck struct {
	What  string `json:"what"`
	Holds bool   `json:"holds"`
	Got   string `json:"got"`
}

// outageFigures are the outage scenario's measurements (Report.Figures).
type outageFigures struct {
	Quota          int64         `json:"quota"`
	WindowSeconds  float64       `json:"window_seconds"`
	RatePerPath    int           `json:"rate_per_path"`
	TimeoutMs      float64       `json:"redis_timeout_ms"`
	LatencyBoundMs float64       `json:"latency_bound_ms"`
	RecoveryMs     []int64       `json:"recovery_ms"`
	Phases         []outagePhase `json:"phases"`
	Checks         []outageCheck `json:"checks"`
	Breakers       [][]string    `json:"breaker_transitions"`
	// Bins holds the chart's series, one value per 100 ms from the start.
	Bins map[string][]float64 `json:"per_100ms"`
}

func runOutage(ctx context.Context, e *env) (*Report, error) {
	tm := outageFull
	if e.opt.Short {
		tm = outageShort
	}
	sources, err := bench.ParseSources(outageSources)
	if err != nil {
		return nil, err
	}
	node, err := e.startRedisNode(ctx, "redis", 0)
	if err != nil {
		return nil, err
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "redis: {url: redis://%s/0, timeout: %v}\nkeys: {secret: %s}\n", node.addr(), outageTimeout, outageSecret)
	cfg.WriteString(ipLimitsRaised + abuseOff + "policies:\n")
	for _, m := range outageModes {
		fmt.Fprintf(&cfg, "  - {name: %s, match: {path_prefix: /%s/}, key: [header:X-API-Key], algorithm: token_bucket, quota: %d, window: %v, on_store_failure: %s}\n",
			m, m, outageQuota, outageWindow, m)
	}
	var edges []*server
	for i := range outageEdges {
		s, err := e.startH3edge(ctx, fmt.Sprintf("h3edge-%d", i+1), cfg.String())
		if err != nil {
			return nil, err
		}
		edges = append(edges, s)
	}
	load := &fleetLoad{
		edges: edges, sources: sources, streams: outageStreams, apiKey: outageKey,
		rate: outageRate * float64(len(outageModes)), timeout: 2 * time.Second,
	}
	for _, m := range outageModes {
		load.paths = append(load.paths, "/"+m+"/x")
	}
	if err := load.connect(ctx); err != nil {
		return nil, err
	}
	defer load.close()

	// The edges announce themselves every second; the kill comes after both have seen
	// a fleet of two.
	start := time.Now().Add(200 * time.Millisecond)
	total := tm.before + tm.killed + tm.restarted + tm.stopped + tm.continued
	end := start.Add(total)
	var recs []fleetRecord
	var loadErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		recs, loadErr = load.run(ctx, start, end)
	}()

	var ev struct{ kill, restart, restartReady, stop, cont time.Time }
	stopped := false
	defer func() {
		if stopped {
			_ = node.signal(syscall.SIGCONT)
		}
	}()
	fault := func() error {
		at := start.Add(tm.before)
		if !sleep(ctx, time.Until(at)) {
			return context.Cause(ctx)
		}
		if err := node.signal(syscall.SIGKILL); err != nil {
			return err
		}
		ev.kill = time.Now()
		<-node.p.done
		e.logf("redis killed at +%.3fs", ev.kill.Sub(start).Seconds())
		at = at.Add(tm.killed)
		if !sleep(ctx, time.Until(at)) {
			return context.Cause(ctx)
		}
		ev.restart = time.Now()
		if err := e.restartRedis(ctx, node); err != nil {
			return err
		}
		ev.restartReady = time.Now()
		e.logf("redis restarted at +%.3fs, ready after %v", ev.restart.Sub(start).Seconds(), ev.restartReady.Sub(ev.restart).Round(time.Millisecond))
		at = at.Add(tm.restarted)
		if !sleep(ctx, time.Until(at)) {
			return context.Cause(ctx)
		}
		if err := node.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		ev.stop, stopped = time.Now(), true
		at = at.Add(tm.stopped)
		if !sleep(ctx, time.Until(at)) {
			return context.Cause(ctx)
		}
		if err := node.signal(syscall.SIGCONT); err != nil {
			return err
		}
		ev.cont, stopped = time.Now(), false
		e.logf("redis stopped at +%.3fs, continued at +%.3fs", ev.stop.Sub(start).Seconds(), ev.cont.Sub(start).Seconds())
		return nil
	}
	ferr := fault()
	<-done
	if ferr != nil {
		return nil, ferr
	}
	if loadErr != nil {
		return nil, loadErr
	}
	var panics []string
	var breakers [][]string
	for _, s := range edges {
		breakers = append(breakers, breakerLog(s.out.String(), start))
		if err := s.alive(); err != nil {
			return nil, err
		}
		if out := s.out.String(); strings.Contains(out, "panic:") || strings.Contains(out, "fatal error:") {
			panics = append(panics, s.name)
		}
	}

	// Phases, by the instants the faults happened.
	type span struct {
		name     string
		from, to time.Time
	}
	spans := []span{
		{"before", start, ev.kill},
		{"SIGKILL", ev.kill, ev.restartReady},
		{"restarted", ev.restartReady, ev.stop},
		{"SIGSTOP", ev.stop, ev.cont},
		{"continued", ev.cont, end},
	}
	var phases []outagePhase
	for _, sp := range spans {
		ph := outagePhase{Phase: sp.name, From: sp.from.Sub(start).Seconds(), To: sp.to.Sub(start).Seconds()}
		for mi, m := range outageModes {
			ph.Modes = append(ph.Modes, outageStats(recs, mi, m, sp.from, sp.to))
		}
		phases = append(phases, ph)
	}

	var checks []outageCheck
	check := func(ok bool, what, got string, args ...any) {
		checks = append(checks, outageCheck{What: what, Holds: ok, Got: fmt.Sprintf(got, args...)})
	}
	// Latency: the allowance over the timeout is 5 ms, or the quiet p99 if the client
	// and server overhead alone exceed that here.
	quiet := phases[0]
	var quietP99 time.Duration
	for _, m := range quiet.Modes {
		quietP99 = max(quietP99, time.Duration(m.P99us)*time.Microsecond)
	}
	allow := max(outageAllow, quietP99)
	bound := outageTimeout + allow
	for _, pi := range []int{1, 3} {
		for _, m := range phases[pi].Modes {
			p99 := time.Duration(m.P99us) * time.Microsecond
			check(p99 <= bound, fmt.Sprintf("%s, %s: p99 ≤ %v", phases[pi].Phase, m.Mode, bound), "p99 %s, max %s", ms(p99), ms(time.Duration(m.Maxus)*time.Microsecond))
		}
	}

	// What each mode did during each outage, per edge.
	q := float64(outageQuota)
	for _, o := range []struct {
		name     string
		from, to time.Time
	}{{"SIGKILL", ev.kill, ev.restartReady}, {"SIGSTOP", ev.stop, ev.cont}} {
		secs := o.to.Sub(o.from).Seconds() / outageWindow.Seconds()
		for ei := range edges {
			for mi, m := range outageModes {
				if m == "closed" {
					continue
				}
				quota := q
				if m == "local" {
					quota = q / outageEdges
				}
				n := admittedIn(recs, mi, ei, o.from.Add(outageGuard), o.to)
				hi := int(math.Floor(quota + quota*secs + outageSlack))
				lo := int(math.Ceil(quota*secs - outageSlack))
				what := fmt.Sprintf("%s, %s, edge %d: admits within the backstop (quota %d + %d/s)", o.name, m, ei+1, int(quota), int(quota))
				if m == "local" {
					what = fmt.Sprintf("%s, %s, edge %d: admits quota ÷ fleet (%d + %d/s)", o.name, m, ei+1, int(quota), int(quota))
				}
				check(n >= lo && n <= hi, what, "admitted %d in %.2fs (from %d to %d)", n, o.to.Sub(o.from).Seconds(), lo, hi)
			}
		}
		// closed: every request sent during the outage answered 503 with the problem,
		// but for denials the negative cache still held: a 429 remembered until its
		// Retry-After, at most one refill interval (W/Q) at this load, is repeated
		// without asking Redis.
		var n, bad, cached int
		for _, r := range recs {
			if r.path != slices.Index(outageModes, "closed") || r.sent.Before(o.from.Add(outageGuard)) || !r.recv.Before(o.to) {
				continue
			}
			n++
			switch {
			case r.code == http.StatusServiceUnavailable && r.reduced && r.retryAfter:
			case r.code == http.StatusTooManyRequests && r.sent.Before(o.from.Add(outageGuard+outageWindow/outageQuota)):
				cached++
			default:
				bad++
			}
		}
		check(n > 0 && bad == 0, o.name+", closed: every answer 503 + Retry-After + temporary-reduced-capacity (or a denial still in the negative cache)",
			"%d of %d were not; %d denials from the negative cache", bad, n, cached)
	}

	// Recovery: from Redis answering again (restarted and ready, or continued), the time
	// until every edge's closed policy admitted again; then exact global limiting.
	var recov []time.Duration
	var recovered []time.Time
	for _, o := range []struct {
		name       string
		back, next time.Time
	}{{"SIGKILL", ev.restartReady, ev.stop}, {"SIGSTOP", ev.cont, end}} {
		ci := slices.Index(outageModes, "closed")
		var at time.Time
		ok := true
		for ei := range edges {
			// The first admission on the closed path: only Redis admits there. A
			// later 503 is one decision over its budget, not the outage (counted
			// below as a stray).
			var first time.Time
			for _, r := range recs {
				if r.path != ci || r.edge != ei || r.sent.Before(o.back) || !r.sent.Before(o.next) || r.code != http.StatusOK {
					continue
				}
				if first.IsZero() || r.recv.Before(first) {
					first = r.recv
				}
			}
			ok = ok && !first.IsZero()
			at = maxTime(at, first)
		}
		d := at.Sub(o.back)
		if !ok {
			d = o.next.Sub(o.back)
		}
		recov = append(recov, d)
		recovered = append(recovered, o.back.Add(d))
		check(ok && d <= outageRecovery, fmt.Sprintf("after %s: every edge decides in Redis again within %v", o.name, outageRecovery), "%s", d.Round(time.Millisecond))
		from := at.Add(outageSettle)
		secs := o.next.Sub(from).Seconds() / outageWindow.Seconds()
		for mi, m := range outageModes {
			n := admittedIn(recs, mi, -1, from, o.next)
			exp := q * secs
			check(math.Abs(float64(n)-exp) <= outageSlack+1, fmt.Sprintf("after %s, %s: exact global limiting from recovery + %v", o.name, m, outageSettle),
				"admitted %d over both edges in %.2fs, exact %.1f", n, o.next.Sub(from).Seconds(), exp)
		}
	}
	// Before any fault, the same exactness (the reference).
	for mi, m := range outageModes {
		from := start.Add(outageSettle)
		secs := ev.kill.Sub(from).Seconds() / outageWindow.Seconds()
		n := admittedIn(recs, mi, -1, from, ev.kill)
		exp := q * secs
		check(math.Abs(float64(n)-exp) <= outageSlack+1, fmt.Sprintf("before, %s: exact global limiting", m),
			"admitted %d over both edges in %.2fs, exact %.1f", n, ev.kill.Sub(from).Seconds(), exp)
	}
	// Nothing else: no other 5xx, no failed request, no panic.
	var other5xx, failed, stray503, closedOutside int
	for _, r := range recs {
		outside := !inAny(r.recv, [][2]time.Time{{ev.kill, recovered[0]}, {ev.stop, recovered[1]}})
		if outside && r.path == slices.Index(outageModes, "closed") {
			closedOutside++
		}
		switch {
		case r.code == 0:
			failed++
		case r.code == http.StatusServiceUnavailable && r.path == slices.Index(outageModes, "closed") && r.reduced:
			if outside {
				stray503++
			}
		case r.code >= 500:
			other5xx++
		}
	}
	check(other5xx == 0 && failed == 0, "no other 5xx, no failed request", "%d other 5xx, %d failed", other5xx, failed)
	// Outside the outages a closed-mode 503 is one decision that overran its budget
	// on a busy machine; a breaker that flapped would make many.
	check(stray503*20 <= closedOutside, "closed: at most 5% of answers outside the outages are 503", "%d of %d", stray503, closedOutside)
	check(len(panics) == 0, "no panic", "%v", panics)

	rep := &Report{Holds: true}
	var fails []string
	for _, c := range checks {
		if !c.Holds {
			rep.Holds = false
			fails = append(fails, c.What+": "+c.Got)
		}
	}
	rep.Table = [][]string{{"phase", "mode", "requests", "200", "429", "503 (problem)", "other", "admitted per edge", "p50", "p99", "max"}}
	for _, ph := range phases {
		for _, m := range ph.Modes {
			rep.Table = append(rep.Table, []string{
				fmt.Sprintf("%s %.1f–%.1fs", ph.Phase, ph.From, ph.To), m.Mode, fmt.Sprint(m.Requests), fmt.Sprint(m.OK),
				fmt.Sprint(m.Denied), fmt.Sprint(m.Reduced), fmt.Sprint(m.Other5xx + m.Failed), fmt.Sprint(m.PerEdge),
				ms(time.Duration(m.P50us) * time.Microsecond), ms(time.Duration(m.P99us) * time.Microsecond), ms(time.Duration(m.Maxus) * time.Microsecond),
			})
		}
	}
	maxP99 := func(pi int) time.Duration {
		var d time.Duration
		for _, m := range phases[pi].Modes {
			d = max(d, time.Duration(m.P99us)*time.Microsecond)
		}
		return d
	}
	if rep.Holds {
		rep.Verdict = fmt.Sprintf("p99 during the outages %s (SIGKILL) and %s (SIGSTOP) against %v (quiet p99 %s); open admitted within its backstop, closed answered 503 with the problem, local held quota ÷ 2 per edge; exact limiting again %s after the restart and %s after SIGCONT; no other 5xx, no failure, no panic",
			ms(maxP99(1)), ms(maxP99(3)), bound, ms(quietP99), recov[0].Round(time.Millisecond), recov[1].Round(time.Millisecond))
	} else {
		rep.Verdict = strings.Join(fails, "; ")
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("%d edges on one redis-server, redis.timeout %v; policies token_bucket %d per %v keyed by one API key, on_store_failure open (/open/), closed (/closed/), local (/local/); %d h3 connections (%s) × %d streams, open loop at %d req/s per path (%d× the quota), latency from the intended send time",
			outageEdges, outageTimeout, outageQuota, outageWindow, len(sources), outageSources, outageStreams, outageRate, outageRate/outageQuota),
		fmt.Sprintf("faults: SIGKILL at +%.2fs, restart on the same port at +%.2fs (ready +%.2fs), SIGSTOP at +%.2fs, SIGCONT at +%.2fs, end at +%.2fs",
			ev.kill.Sub(start).Seconds(), ev.restart.Sub(start).Seconds(), ev.restartReady.Sub(start).Seconds(), ev.stop.Sub(start).Seconds(), ev.cont.Sub(start).Seconds(), total.Seconds()),
		fmt.Sprintf("latency bound: redis.timeout + max(5 ms, quiet p99) = %v (quiet p99 %s)", bound, ms(quietP99)),
		"admissions are counted by when their response arrived; the backstop (open) and the divided quota (local) start full at an outage; recovery is when the first closed-mode 200 after Redis came back arrived, on the slower edge (closed admits only through Redis); a restarted Redis is empty, so its bucket starts full",
	)
	for ei, b := range breakers {
		rep.Notes = append(rep.Notes, fmt.Sprintf("edge %d's log: circuit breaker %s", ei+1, strings.Join(b, ", ")))
	}
	if stray503 > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d closed-mode 503s outside the outages (a decision over its %v budget)", stray503, outageTimeout))
	}
	if e.opt.Short {
		rep.Notes = append(rep.Notes, "short mode: shorter phases (1.3 s before, 1.63 s killed, 2.2 s restarted, 1.13 s stopped, 2.2 s continued instead of 4, 5.13, 6, 5.13, 6 s)")
	}
	rep.Chart = outageChart(recs, start, total, []chart.Marker{
		{At: ev.kill.Sub(start).Seconds(), Label: "SIGKILL"},
		{At: ev.restartReady.Sub(start).Seconds(), Label: "restart"},
		{At: ev.stop.Sub(start).Seconds(), Label: "SIGSTOP"},
		{At: ev.cont.Sub(start).Seconds(), Label: "SIGCONT"},
	})
	fig := &outageFigures{outageQuota, outageWindow.Seconds(), outageRate, float64(outageTimeout) / 1e6, float64(bound) / 1e6,
		[]int64{recov[0].Milliseconds(), recov[1].Milliseconds()}, phases, checks, breakers, map[string][]float64{}}
	for _, ser := range rep.Chart.Series {
		fig.Bins[ser.Name] = ser.Y
	}
	rep.Figures = fig
	return rep, nil
}

// outageStats sums mode mi's requests intended in [from, to); admissions per edge
// count responses that arrived in [from, to).
func outageStats(recs []fleetRecord, mi int, mode string, from, to time.Time) outageMode {
	m := outageMode{Mode: mode, PerEdge: make([]int, outageEdges)}
	h := bench.NewHistogram()
	for _, r := range recs {
		if r.path != mi {
			continue
		}
		if r.code == http.StatusOK && !r.recv.Before(from) && r.recv.Before(to) {
			m.PerEdge[r.edge]++
		}
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		m.Requests++
		switch {
		case r.code == 0:
			m.Failed++
			continue
		case r.code == http.StatusOK:
			m.OK++
		case r.code == http.StatusTooManyRequests:
			m.Denied++
		case r.code == http.StatusServiceUnavailable && r.reduced && r.retryAfter:
			m.Reduced++
		case r.code >= 500:
			m.Other5xx++
		}
		us := max(r.recv.Sub(r.at).Microseconds(), 1)
		_ = h.RecordValue(us)
		m.Maxus = max(m.Maxus, us)
	}
	if h.TotalCount() > 0 {
		m.P50us, m.P99us = h.ValueAtQuantile(50), h.ValueAtQuantile(99)
	}
	return m
}

// admittedIn counts the 200s of mode mi on edge ei (-1: every edge) whose response
// arrived in [from, to).
func admittedIn(recs []fleetRecord, mi, ei int, from, to time.Time) int {
	n := 0
	for _, r := range recs {
		if r.path == mi && (ei < 0 || r.edge == ei) && r.code == http.StatusOK && !r.recv.Before(from) && r.recv.Before(to) {
			n++
		}
	}
	return n
}

// inAny reports whether t lies in one of the closed spans.
func inAny(t time.Time, spans [][2]time.Time) bool {
	for _, s := range spans {
		if !t.Before(s[0]) && !t.After(s[1]) {
			return true
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// outageChart draws, per 100 ms, each mode's admissions over both edges and the p99
// latency of the requests intended in that bin, one panel each.
func outageChart(recs []fleetRecord, start time.Time, total time.Duration, events []chart.Marker) *chart.Chart {
	nb := int((total + outageBin - 1) / outageBin)
	admitted := make([][]float64, len(outageModes))
	lat := make([][][]int64, len(outageModes))
	for mi := range outageModes {
		admitted[mi] = make([]float64, nb)
		lat[mi] = make([][]int64, nb)
	}
	for _, r := range recs {
		if r.code == http.StatusOK {
			if k := int(r.recv.Sub(start) / outageBin); k >= 0 && k < nb {
				admitted[r.path][k]++
			}
		}
		if r.code != 0 {
			if k := int(r.at.Sub(start) / outageBin); k >= 0 && k < nb {
				lat[r.path][k] = append(lat[r.path][k], r.recv.Sub(r.at).Microseconds())
			}
		}
	}
	c := &chart.Chart{
		Title:  "Redis killed, restarted, stopped and continued: per 100 ms, by on_store_failure",
		XLabel: "seconds from start (dashed: faults)",
		YLabel: "admitted per 100 ms  |  p99 latency (ms)",
		Panels: true,
		VLines: events,
	}
	for mi, m := range outageModes {
		s := chart.Series{Name: m + ": admitted", Step: true}
		for k := range nb {
			s.X = append(s.X, (time.Duration(k) * outageBin).Seconds())
			s.Y = append(s.Y, admitted[mi][k])
		}
		c.Series = append(c.Series, s)
	}
	for mi, m := range outageModes {
		s := chart.Series{Name: m + ": p99 ms", Step: true}
		for k := range nb {
			v := 0.0
			if xs := lat[mi][k]; len(xs) > 0 {
				slices.Sort(xs)
				v = float64(xs[int(math.Ceil(0.99*float64(len(xs))))-1]) / 1000
			}
			s.X = append(s.X, (time.Duration(k) * outageBin).Seconds())
			s.Y = append(s.Y, v)
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// breakerLog lists the transitions of the quota store's circuit breaker that an edge
// logged ("quota store circuit open" and "… closed", text log format), as seconds from
// start.
func breakerLog(out string, start time.Time) []string {
	var ev []string
	for line := range strings.SplitSeq(out, "\n") {
		var state string
		switch {
		case strings.Contains(line, `msg="quota store circuit open"`):
			state = "open"
		case strings.Contains(line, `msg="quota store circuit closed"`):
			state = "closed"
		default:
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		ev = append(ev, fmt.Sprintf("%s at +%.3fs", state, t.Sub(start).Seconds()))
	}
	return ev
}
