package scenario

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/headers"
)

const claimAccuracy = "3 h3edge processes sharing one API key's quota through Redis (one node, then a 3-master Redis Cluster), hammered by 200 concurrent HTTP/3 clients far above the quota: token_bucket, gcra, fixed_window and sliding_log admit exactly what the algorithm allows in every window (0 over, 0 under); sliding_window never more than Q per aligned window and less than 2Q in any window-length span (its documented bound); a token bucket with lease: 10 over-admits at most lease × edges per window"

// The accuracy scenario: Q per W for each algorithm, one API key, on separate paths of
// the same three edges, all hammered at once.
const (
	accuracyEdges   = 3
	accuracyClients = 200 // HTTP/3 connections, one per loopback source
	accuracyStreams = 2   // requests in flight per connection at most
	accuracyLease   = 10
	accuracyKey     = "h3bench-accuracy-key"
	accuracySecret  = "h3bench-accuracy-secret"
	// accuracyTail keeps demand on past the last counted window, so that it is a window
	// like the others: a bucket whose first admission slipped (a loaded machine) still
	// finds a request after its last refill before the window ends. Requests sent after
	// the end are not counted.
	accuracyTail = 100 * time.Millisecond
)

// accuracySources are the clients' addresses, one connection each, spread over the
// edges round-robin.
const accuracySources = "127.0.0.2-127.0.0.201"

// accuracyParams are one mode's quota, window, number of counted windows and total
// offered rate (over all paths).
type accuracyParams struct {
	quota   int64
	window  time.Duration
	windows int
	rate    float64
}

var (
	accuracyFull  = accuracyParams{quota: 100, window: 5 * time.Second, windows: 3, rate: 2000}
	accuracyShort = accuracyParams{quota: 20, window: time.Second, windows: 2, rate: 1500}
)

// accuracyPolicy is one policy of the scenario, on its own path.
type accuracyPolicy struct {
	name, algorithm string
	lease           int64
}

var accuracyPolicies = []accuracyPolicy{
	{"token_bucket", "token_bucket", 0},
	{"gcra", "gcra", 0},
	{"fixed_window", "fixed_window", 0},
	{"sliding_log", "sliding_log", 0},
	{"sliding_window", "sliding_window", 0},
	{"lease", "token_bucket", accuracyLease},
}

func (p accuracyPolicy) path() string { return "/" + p.name + "/x" }

func (p accuracyPolicy) label() string {
	if p.lease > 0 {
		return fmt.Sprintf("%s, lease %d", p.algorithm, p.lease)
	}
	return p.algorithm
}

// accuracyAlgo is what one policy admitted in one pass.
type accuracyAlgo struct {
	Policy    string `json:"policy"`
	Algorithm string `json:"algorithm"`
	Lease     int64  `json:"lease,omitempty"`
	Requests  int    `json:"requests"`
	Admitted  int    `json:"admitted"` // in the counted windows
	Denied    int    `json:"denied"`
	// StoreFailed counts 503s (on_store_failure closed: Redis did not decide in time).
	StoreFailed int `json:"store_failed_503"`
	// Other counts other statuses and failed requests.
	Other int `json:"other"`
	// PerWindow counts admissions per aligned window by the time their response
	// arrived; Expected is what the algorithm admits there under continuous demand
	// (nil for sliding_window, bounded by Q instead).
	PerWindow []int `json:"per_window"`
	Expected  []int `json:"expected_per_window,omitempty"`
	// Over and Under are the largest excess and shortfall of a window against Expected
	// (sliding_window: against Q); TotalOver is the sum of admitted less the sum of
	// expected.
	Over      int `json:"over"`
	Under     int `json:"under"`
	TotalOver int `json:"total_over"`
	// PeakSpan is the most admitted in any span of one window length; SpanError is
	// PeakSpan − Q, and SpanBound the documented bound on PeakSpan (sliding_window:
	// 2Q − 1).
	PeakSpan  int `json:"peak_in_window_span"`
	SpanError int `json:"span_error"`
	SpanBound int `json:"span_bound,omitempty"`
	// SlidingBound (sliding_window) is the tightest span's own bound, Q plus the excess
	// of the previous window's traffic over an even spread, and SlidingSpan that span's
	// count.
	SlidingBound int `json:"sliding_bound,omitempty"`
	SlidingSpan  int `json:"sliding_span,omitempty"`
	// Bound is the claim's limit on Over (0 when exact; lease × edges).
	Bound int `json:"bound"`
	// Straddling counts admissions sent before a window edge and answered after it:
	// the client cannot tell on which side they were decided. Late counts those of
	// them sent in the last window and answered after it: not in PerWindow, so the
	// total may fall short by up to Late.
	Straddling int `json:"straddling"`
	Late       int `json:"late"`
	// Carried (token_bucket, gcra): the admissions fit only with the bucket's start
	// elsewhere between the first send and answer than the shown expectation's, or
	// with a refill taken after the edge it fell before (bucketFits), neither of which
	// the client can rule out.
	Carried bool   `json:"carried"`
	Holds   bool   `json:"holds"`
	Why     string `json:"why"`
}

// accuracyPass is one store's run: a single Redis node or the cluster.
type accuracyPass struct {
	Store     string         `json:"store"`
	Start     time.Time      `json:"start"`
	Requests  int            `json:"requests"`
	P99us     int64          `json:"p99_us"`
	Errors    int            `json:"errors"`
	Keys      int            `json:"redis_keys"`
	KeysNoTTL []string       `json:"redis_keys_without_ttl,omitempty"`
	KeysRaw   []string       `json:"redis_keys_with_raw_api_key,omitempty"`
	Policies  []accuracyAlgo `json:"policies"`
}

// accuracyFigures are the accuracy scenario's measurements (Report.Figures).
type accuracyFigures struct {
	Quota         int64          `json:"quota"`
	WindowSeconds float64        `json:"window_seconds"`
	Windows       int            `json:"windows"`
	Rate          float64        `json:"rate"`
	Edges         int            `json:"edges"`
	Clients       int            `json:"clients"`
	Passes        []accuracyPass `json:"passes"`
}

func runAccuracy(ctx context.Context, e *env) (*Report, error) {
	par := accuracyFull
	if e.opt.Short {
		par = accuracyShort
	}
	sources, err := bench.ParseSources(accuracySources)
	if err != nil {
		return nil, err
	}

	var passes []accuracyPass
	// Single node.
	node, err := e.startRedisNode(ctx, "redis", 0)
	if err != nil {
		return nil, err
	}
	pass, err := accuracyRun(ctx, e, par, sources, "single node", "e",
		fmt.Sprintf("{url: redis://%s/0, timeout: %v}", node.addr(), accuracyStoreTimeout), []*redisNode{node})
	if err != nil {
		return nil, err
	}
	passes = append(passes, *pass)
	node.p.stop()

	// Cluster.
	nodes, err := e.startRedisCluster(ctx, "redis-cluster")
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr())
	}
	pass, err = accuracyRun(ctx, e, par, sources, "3-node cluster", "c",
		fmt.Sprintf("{cluster: [%s], timeout: %v}", strings.Join(addrs, ", "), accuracyStoreTimeout), nodes)
	if err != nil {
		return nil, err
	}
	passes = append(passes, *pass)

	rep := &Report{Holds: true}
	rep.Table = [][]string{{"store", "policy", "admitted", "expected", "per window", "over", "under", "peak in W", "503", "ok"}}
	var fails []string
	ch := &chart.Chart{
		Title:  fmt.Sprintf("Admitted per window ÷ what the algorithm allows (Q = %d per %v, 3 edges, 200 clients)", par.quota, par.window),
		XLabel: "policy (bars: mean over windows; whiskers: lowest and highest window)",
		YLabel: "admitted ÷ allowed, per window",
		HLines: []chart.Marker{{At: 1, Label: "exact"}},
		YMin:   0, YMax: 1.25,
	}
	for _, p := range accuracyPolicies {
		ch.Categories = append(ch.Categories, p.label())
	}
	for _, ps := range passes {
		ser := chart.Series{Name: ps.Store}
		for _, a := range ps.Policies {
			expected := "-"
			sumExp := 0
			for _, x := range a.Expected {
				sumExp += x
			}
			if a.Expected != nil {
				expected = fmt.Sprint(sumExp)
			} else {
				expected = fmt.Sprintf("≤ %d", int64(len(a.PerWindow))*par.quota)
			}
			peak := fmt.Sprint(a.PeakSpan)
			if a.SpanBound > 0 {
				peak = fmt.Sprintf("%d (≤ %d)", a.PeakSpan, a.SpanBound)
			}
			rep.Table = append(rep.Table, []string{
				ps.Store, accuracyLabel(a), fmt.Sprint(a.Admitted), expected, fmt.Sprint(a.PerWindow),
				fmt.Sprint(a.Over), fmt.Sprint(a.Under), peak, fmt.Sprint(a.StoreFailed), okMark(a.Holds),
			})
			if !a.Holds {
				rep.Holds = false
				fails = append(fails, fmt.Sprintf("%s %s: %s", ps.Store, accuracyLabel(a), a.Why))
			}
			mean, lo, hi := ratioStats(a, par.quota)
			ser.Y = append(ser.Y, mean)
			ser.Low = append(ser.Low, lo)
			ser.High = append(ser.High, hi)
		}
		ch.Series = append(ch.Series, ser)
		if len(ps.KeysNoTTL) > 0 || len(ps.KeysRaw) > 0 {
			rep.Holds = false
			fails = append(fails, fmt.Sprintf("%s: Redis keys without expiry %v, with the raw API key %v", ps.Store, ps.KeysNoTTL, ps.KeysRaw))
		}
		if ps.Errors > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d requests failed at the transport", ps.Store, ps.Errors))
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d requests, client p99 %s; %d Redis keys after the run, every one with an expiry: %v, none holding the raw API key: %v",
			ps.Store, ps.Requests, ms(time.Duration(ps.P99us)*time.Microsecond), ps.Keys, len(ps.KeysNoTTL) == 0, len(ps.KeysRaw) == 0))
	}
	rep.Chart = ch
	if rep.Holds {
		var b strings.Builder
		for _, ps := range passes {
			for _, a := range ps.Policies {
				if a.Algorithm == "sliding_window" {
					fmt.Fprintf(&b, "%s: sliding_window peak %d in a window span (error %+d, bound %d); ", ps.Store, a.PeakSpan, a.SpanError, a.SpanBound)
				}
				if a.Lease > 0 {
					fmt.Fprintf(&b, "%s: lease over-admitted %d (bound %d); ", ps.Store, a.Over, a.Bound)
				}
			}
		}
		rep.Verdict = "every exact algorithm admitted exactly what it allows in every window, on one node and on the cluster; " + strings.TrimSuffix(b.String(), "; ")
	} else {
		rep.Verdict = strings.Join(fails, "; ")
	}
	mode := "full"
	if e.opt.Short {
		mode = "short"
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("%s mode: Q = %d per W = %v, %d counted windows per store, all six policies at once; %d h3 clients (%s, one connection each, %d in flight at most) spread over %d edges, open loop at %.0f req/s in all (%.0f per policy, %.0f× its average quota rate), every request with the same API key",
			mode, par.quota, par.window, par.windows, accuracyClients, accuracySources, accuracyStreams, accuracyEdges, par.rate,
			par.rate/float64(len(accuracyPolicies)), par.rate/float64(len(accuracyPolicies))/(float64(par.quota)/par.window.Seconds())),
		fmt.Sprintf("edges: redis.timeout %v (this scenario is about exactness; the outage scenario holds latency to the 10ms default), on_store_failure closed (a store failure shows as a 503, never as a silent local admission), ip: raised, penalty box off, keys.secret shared", accuracyStoreTimeout),
		fmt.Sprintf("windows are aligned to the Unix epoch; the run starts W/(2Q) = %v after a boundary, so a token bucket's refills fall half a refill interval from every window edge; an admission is counted in the window its response arrived in",
			par.window/time.Duration(2*par.quota)),
		"expected per window: fixed_window and sliding_log Q; token_bucket and gcra Q in every window but the first, which holds the full bucket plus its refills (Q + ⌈(end of window − first admission)·Q/W⌉ − 1, for any first admission between the earliest send and the earliest answer of an admitted request); sliding_window at most Q per aligned window")
	if e.opt.Short {
		rep.Notes = append(rep.Notes, "short mode: shorter windows (1 s instead of 5 s), 2 windows per store instead of 3, quota 20 instead of 100, 1500 req/s instead of 2000; the same six policies and both stores")
	}
	rep.Figures = &accuracyFigures{par.quota, par.window.Seconds(), par.windows, par.rate, accuracyEdges, accuracyClients, passes}
	return rep, nil
}

func accuracyLabel(a accuracyAlgo) string {
	if a.Lease > 0 {
		return fmt.Sprintf("%s, lease %d", a.Algorithm, a.Lease)
	}
	return a.Algorithm
}

// ratioStats returns the mean, lowest and highest of admitted ÷ expected over the
// windows (expected Q where the algorithm has no exact figure).
func ratioStats(a accuracyAlgo, q int64) (mean, lo, hi float64) {
	lo, hi = 1e18, -1e18
	for k, n := range a.PerWindow {
		exp := float64(q)
		if k < len(a.Expected) {
			exp = float64(a.Expected[k])
		}
		r := float64(n) / exp
		mean += r
		lo, hi = min(lo, r), max(hi, r)
	}
	if len(a.PerWindow) > 0 {
		mean /= float64(len(a.PerWindow))
	}
	return mean, lo, hi
}

// accuracyStoreTimeout is the edges' redis.timeout here: generous, so that a Redis
// round trip slowed by a busy machine (CI runs test packages side by side on two cores)
// is not counted as a store failure; the latency bound is the outage scenario's claim.
const accuracyStoreTimeout = 250 * time.Millisecond

// accuracyRun starts three edges on the store described by redisYAML, hammers them
// and counts what each policy admitted; the edges are stopped at the end.
func accuracyRun(ctx context.Context, e *env, par accuracyParams, sources []netip.Addr, store, prefix, redisYAML string, nodes []*redisNode) (*accuracyPass, error) {
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "redis: %s\nkeys: {secret: %s}\n", redisYAML, accuracySecret)
	cfg.WriteString(ipLimitsRaised + abuseOff + "policies:\n")
	for _, p := range accuracyPolicies {
		fmt.Fprintf(&cfg, "  - {name: %s, match: {path_prefix: /%s/}, key: [header:X-API-Key], algorithm: %s, quota: %d, window: %v, on_store_failure: closed",
			p.name, p.name, p.algorithm, par.quota, par.window)
		if p.lease > 0 {
			fmt.Fprintf(&cfg, ", lease: %d", p.lease)
		}
		cfg.WriteString("}\n")
	}
	var edges []*server
	for i := range accuracyEdges {
		s, err := e.startH3edge(ctx, fmt.Sprintf("h3edge-%s%d", prefix, i+1), cfg.String())
		if err != nil {
			return nil, err
		}
		edges = append(edges, s)
	}
	defer func() {
		for _, s := range edges {
			s.stop()
		}
	}()
	load := &fleetLoad{
		edges: edges, sources: sources, streams: accuracyStreams, apiKey: accuracyKey,
		rate: par.rate, timeout: 2 * time.Second,
	}
	for _, p := range accuracyPolicies {
		load.paths = append(load.paths, p.path())
	}
	if err := load.connect(ctx); err != nil {
		return nil, err
	}
	defer load.close()

	// Start W/(2Q) after the next window boundary at least 200 ms away.
	half := par.window / time.Duration(2*par.quota)
	base := windowStart(time.Now().Add(200*time.Millisecond-half), par.window).Add(par.window)
	start := base.Add(half)
	end := base.Add(time.Duration(par.windows)*par.window + accuracyTail)
	e.logf("%s: starting at %s, %d windows of %v", store, start.Format("15:04:05.000"), par.windows, par.window)
	recs, err := load.run(ctx, start, end)
	if err != nil {
		return nil, err
	}
	for _, s := range edges {
		if err := s.alive(); err != nil {
			return nil, err
		}
	}

	ps := &accuracyPass{Store: store, Start: start, Requests: len(recs)}
	lat := bench.NewHistogram()
	for _, r := range recs {
		if r.code == 0 {
			ps.Errors++
			continue
		}
		_ = lat.RecordValue(max(r.recv.Sub(r.at).Microseconds(), 1))
	}
	ps.P99us = lat.ValueAtQuantile(99)
	for i, p := range accuracyPolicies {
		ps.Policies = append(ps.Policies, accuracyStats(recs, i, p, base, par, accuracyEdges))
	}
	// Every key the edges wrote must expire and none may hold the raw API key.
	for _, n := range nodes {
		keys, err := redisKeys(ctx, n.addr())
		if err != nil {
			return nil, err
		}
		ps.Keys += len(keys)
		ttls, err := redisTTLs(ctx, n.addr(), keys)
		if err != nil {
			return nil, err
		}
		for i, k := range keys {
			if ttls[i] == -1 {
				ps.KeysNoTTL = append(ps.KeysNoTTL, k)
			}
			if strings.Contains(k, accuracyKey) {
				ps.KeysRaw = append(ps.KeysRaw, k)
			}
		}
	}
	return ps, nil
}

// accuracyStats counts what policy pi admitted per window from base and compares it
// with what its algorithm allows.
func accuracyStats(recs []fleetRecord, pi int, pol accuracyPolicy, base time.Time, par accuracyParams, edges int) accuracyAlgo {
	q, w, nw := int(par.quota), par.window, par.windows
	a := accuracyAlgo{Policy: pol.name, Algorithm: pol.algorithm, Lease: pol.lease, PerWindow: make([]int, nw)}
	win := func(t time.Time) int {
		d := t.Sub(base)
		if d < 0 {
			return -1
		}
		return int(d / w)
	}
	var admitted []time.Time
	// The first admission was decided between the earliest send and the earliest
	// answer of an admitted request.
	var firstSent, firstRecv time.Time
	seen := false
	var adm []*fleetRecord // the counted admissions
	// sure[k] counts admissions sent and answered within window k; amb[k] those sent
	// in window k and answered in k+1, decided on one side or the other.
	sure, amb := make([]int, nw), make([]int, nw)
	for i := range recs {
		r := &recs[i]
		if r.path != pi {
			continue
		}
		a.Requests++
		switch r.code {
		case http.StatusOK:
			k, ks := win(r.recv), win(r.sent)
			switch {
			case ks >= 0 && ks < nw && k == ks+1:
				amb[ks]++
				a.Straddling++
				if k == nw {
					a.Late++
				}
			case k >= 0 && k < nw:
				sure[k]++
			}
			if k < 0 || k >= nw {
				continue
			}
			a.Admitted++
			a.PerWindow[k]++
			admitted = append(admitted, r.recv)
			adm = append(adm, r)
			if !seen || r.sent.Before(firstSent) {
				firstSent = r.sent
			}
			if !seen || r.recv.Before(firstRecv) {
				firstRecv = r.recv
			}
			seen = true
		case http.StatusTooManyRequests:
			a.Denied++
		case http.StatusServiceUnavailable:
			a.StoreFailed++
		default:
			a.Other++
		}
	}
	slices.SortFunc(admitted, func(x, y time.Time) int { return x.Compare(y) })
	a.PeakSpan = peakIn(admitted, w)
	a.SpanError = a.PeakSpan - q

	exact := true
	g := w / time.Duration(q) // a token bucket's refill interval
	switch pol.algorithm {
	case "fixed_window", "sliding_log":
		for range nw {
			a.Expected = append(a.Expected, q)
		}
	case "token_bucket", "gcra":
		// The bucket starts full at the first admission t0 and then gains one unit
		// every W/Q: the first window holds Q plus the refills before its end, every
		// later window exactly Q refills (W/Q divides W). The client knows t0 only to
		// lie between firstSent and firstRecv (the midpoint taken before missed by
		// one in most short runs of a host whose first answers took 20–40 ms), so
		// each start in that span is tried (bucketFits); the expectation shown is the
		// first window's nearest to what came.
		first0 := q
		if seen {
			lo, hi := q+bucketRefills(base.Add(w), firstRecv, g), q+bucketRefills(base.Add(w), firstSent, g)
			first0 = min(max(a.PerWindow[0], lo), hi)
		}
		a.Expected = append(a.Expected, first0)
		for range nw - 1 {
			a.Expected = append(a.Expected, q)
		}
	default: // sliding_window
		exact = false
	}
	a.Over, a.Under = 0, 0
	for k, n := range a.PerWindow {
		exp := q
		if a.Expected != nil {
			exp = a.Expected[k]
		}
		a.Over = max(a.Over, n-exp)
		a.Under = max(a.Under, exp-n)
		a.TotalOver += n - exp
	}
	failures := fmt.Sprintf("%d store failures (503), %d other", a.StoreFailed, a.Other)
	switch {
	case pol.lease > 0:
		a.Bound = int(pol.lease) * edges
		a.Holds = a.Over <= a.Bound && a.StoreFailed == 0 && a.Other == 0
		a.Why = fmt.Sprintf("per window %v against %v: over-admitted at most %d (bound lease × edges = %d), under %d; %s",
			a.PerWindow, a.Expected, a.Over, a.Bound, a.Under, failures)
	case exact:
		a.Holds = a.Over == 0 && a.Under == 0 && a.StoreFailed == 0 && a.Other == 0
		a.Why = fmt.Sprintf("per window %v against %v: %d over, %d under; %s", a.PerWindow, a.Expected, a.Over, a.Under, failures)
		if a.Over != 0 || a.Under != 0 {
			fits := placeable(sure, amb, a.Expected)
			if !fits && seen && (pol.algorithm == "token_bucket" || pol.algorithm == "gcra") {
				for t0 := firstSent; !fits && !t0.After(firstRecv); t0 = t0.Add(time.Millisecond) {
					fits = bucketFits(t0, base, w, g, q, sure, amb, adm)
				}
				a.Carried = fits
			}
			if fits {
				// Counted by response time the windows are off, but the admissions
				// that straddled an edge (or took a refill from before it) can be put
				// on the sides that make them exact: the client cannot tell a
				// miscount from its own view of time.
				a.Holds = a.StoreFailed == 0 && a.Other == 0
				a.Why += "; exact once the admissions that straddled an edge (or took a refill from before it) are placed on the side they may have been decided on"
			}
		}
	default:
		// sliding_window: at most Q in every aligned window, and in any window-length
		// span at most Q plus the previous window's excess over an even spread (below
		// Q, so at most 2Q − 1).
		a.SpanBound = 2*q - 1
		slack := int(^uint(0) >> 1)
		for i, t := range admitted {
			n := countIn(admitted[i:], t.Add(w))
			b := slidingBound(admitted, t, q, w)
			if b-n < slack {
				slack, a.SlidingSpan, a.SlidingBound = b-n, n, b
			}
		}
		a.Holds = a.Over <= 0 && a.PeakSpan <= a.SpanBound && a.StoreFailed == 0 && a.Other == 0
		a.Why = fmt.Sprintf("per window %v (at most Q = %d), peak %d in a window span (error %+d, documented bound 2Q − 1 = %d; tightest span %d against Q + excess = %d); %s",
			a.PerWindow, q, a.PeakSpan, a.SpanError, a.SpanBound, a.SlidingSpan, a.SlidingBound, failures)
	}
	if a.Straddling > 0 {
		a.Why += fmt.Sprintf("; %d admissions straddled a window edge (%d of them the end of the last)", a.Straddling, a.Late)
	}
	if a.Carried {
		a.Why += "; with the bucket's start elsewhere between the first send and answer, or a refill taken after the edge it fell before"
	}
	return a
}

// bucketRefills is how many refills every g from t0 a token bucket gets before end.
func bucketRefills(end, t0 time.Time, g time.Duration) int {
	return int((end.Sub(t0)+g-1)/g) - 1
}

// bucketFits reports whether the admissions fit a token bucket of q per w refilled
// every g from t0: the first window holds q plus the refills before its end, the
// others q each, an admission that straddled an edge may lie on either side, and a
// refill that fell before an edge with no admission surely decided between the two
// (sent after it, answered before the edge) may have been taken after the edge — by
// one of the next window's admissions, or at the end of the last window by one not
// counted.
func bucketFits(t0, base time.Time, w, g time.Duration, q int, sure, amb []int, adm []*fleetRecord) bool {
	nw := len(sure)
	exp := make([]int, nw)
	for k := range exp {
		exp[k] = q
	}
	exp[0] = q + bucketRefills(base.Add(w), t0, g)
	s, a := slices.Clone(sure), slices.Clone(amb)
	short := 0
	for k := range nw {
		edge := base.Add(time.Duration(k+1) * w)
		last := t0.Add((edge.Sub(t0) - 1) / g * g) // the last refill before edge
		taken := slices.ContainsFunc(adm, func(r *fleetRecord) bool { return r.sent.After(last) && r.recv.Before(edge) })
		switch {
		case taken:
		case k+1 < nw && s[k+1] > 0:
			s[k+1]--
			a[k]++
		case k+1 == nw:
			short = 1
		}
	}
	for d := 0; d <= short; d++ {
		e := slices.Clone(exp)
		e[nw-1] -= d
		if placeable(s, a, e) {
			return true
		}
	}
	return false
}

// placeable reports whether admissions can be placed so that window k holds exactly
// exp[k]: sure[k] lie in window k, and amb[k] in window k or k+1 (k+1 = len: after
// the last counted window).
func placeable(sure, amb, exp []int) bool {
	carried := 0 // amb[k-1] placed in window k
	for k := range exp {
		x := exp[k] - sure[k] - carried // amb[k] that must stay in window k
		if x < 0 || x > amb[k] {
			return false
		}
		carried = amb[k] - x
	}
	return true
}

// Redis processes.

// redisNode is a redis-server the scenario started; it can be killed, stopped and
// started again on the same port.
type redisNode struct {
	name string
	port int
	argv []string
	p    *process
}

func (n *redisNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// signal sends sig to the redis-server process (not its group).
func (n *redisNode) signal(sig syscall.Signal) error {
	return n.p.cmd.Process.Signal(sig)
}

// startRedisNode starts redis-server on port (a free one if 0), without persistence,
// with extra arguments, and waits until it accepts connections.
func (e *env) startRedisNode(ctx context.Context, name string, port int, extra ...string) (*redisNode, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", name, err)
	}
	if port == 0 {
		if port, err = testkit.FreePort(); err != nil {
			return nil, err
		}
	}
	argv := append([]string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", e.dir}, extra...)
	n := &redisNode{name: name, port: port, argv: e.wrap(argv)}
	if err := e.restartRedis(ctx, n); err != nil {
		return nil, err
	}
	return n, nil
}

// restartRedis starts n's redis-server (again), on its port.
func (e *env) restartRedis(ctx context.Context, n *redisNode) error {
	p, _, err := startProcess(ctx, n.name, n.argv, nil, func(line string) bool {
		return strings.Contains(line, "Ready to accept connections")
	}, 15*time.Second)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, p)
	n.p = p
	e.logf("started %s (pid %d) on %s", n.name, p.pid(), n.addr())
	return nil
}

// startRedisCluster starts three cluster-enabled redis-server processes and joins
// them into a 3-master Redis Cluster (no replicas) with redis-cli --cluster create.
func (e *env) startRedisCluster(ctx context.Context, prefix string) ([]*redisNode, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", prefix, err)
	}
	var nodes []*redisNode
	var addrs []string
	for i := range 3 {
		name := fmt.Sprintf("%s-%d", prefix, i+1)
		bus, err := testkit.FreePort()
		if err != nil {
			return nil, err
		}
		n, err := e.startRedisNode(ctx, name, 0, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(e.dir, name+"-nodes.conf"),
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(bus))
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		addrs = append(addrs, n.addr())
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(cctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range nodes {
		for {
			out, err := exec.CommandContext(cctx, cli, "-h", "127.0.0.1", "-p", strconv.Itoa(n.port), "cluster", "info").Output()
			if err == nil && bytes.Contains(out, []byte("cluster_state:ok")) {
				break
			}
			if !sleep(cctx, 50*time.Millisecond) {
				return nil, fmt.Errorf("bench: cluster not ok on %s: %v\n%s", n.addr(), err, out)
			}
		}
	}
	e.logf("cluster of %s ready", strings.Join(addrs, ", "))
	return nodes, nil
}

// redisKeys lists every key of the node at addr (redis-cli --scan).
func redisKeys(ctx context.Context, addr string) ([]string, error) {
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.CommandContext(ctx, "redis-cli", "-h", host, "-p", port, "--scan").Output()
	if err != nil {
		return nil, fmt.Errorf("bench: redis-cli --scan on %s: %w", addr, err)
	}
	return strings.Fields(string(out)), nil
}

// redisTTLs returns the TTL of each key (-1: none, -2: gone).
func redisTTLs(ctx context.Context, addr string, keys []string) ([]int, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.CommandContext(ctx, "redis-cli", "-h", host, "-p", port)
	var in strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&in, "TTL %s\n", k)
	}
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("bench: redis-cli TTL on %s: %w", addr, err)
	}
	var ttls []int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		v, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			return nil, fmt.Errorf("bench: redis-cli TTL on %s: %q", addr, sc.Text())
		}
		ttls = append(ttls, v)
	}
	if len(ttls) != len(keys) {
		return nil, fmt.Errorf("bench: redis-cli TTL on %s: %d answers for %d keys", addr, len(ttls), len(keys))
	}
	return ttls, nil
}

// fleetLoad is the load of the Redis scenarios: HTTP/3 connections from many sources
// to several edges, open loop over all of them, request i going to paths[i % len],
// all with one API key, and every request recorded with its intended send time, when
// it left and when its response ended.
type fleetLoad struct {
	edges   []*server
	sources []netip.Addr // one connection per source, to edges[i % len(edges)]
	streams int          // requests in flight per connection at most
	paths   []string
	apiKey  string
	rate    float64 // requests per second over all connections
	timeout time.Duration

	conns   []*bench.Conns // one per edge
	clients []fleetClient
	urls    [][]*url.URL // [edge][path]
	header  http.Header
}

// fleetClient is connection i of conns, to edges[edge].
type fleetClient struct {
	conns *bench.Conns
	i     int
	edge  int
}

// fleetRecord is one request.
type fleetRecord struct {
	path, edge int
	// code is the HTTP status, 0 if the request failed (kind says how).
	code int
	kind bench.ErrorKind
	// reduced: a problem document of type temporary-reduced-capacity; retryAfter: a
	// Retry-After field.
	reduced, retryAfter bool
	at, sent, recv      time.Time // intended send time, actual send, end of the response
}

// connect makes the connections and sends one request on each to a path no policy
// matches, so that handshakes are done before the measured load.
func (l *fleetLoad) connect(ctx context.Context) error {
	l.header = http.Header{"X-Api-Key": {l.apiKey}}
	for ei, s := range l.edges {
		var srcs []netip.Addr
		for i, a := range l.sources {
			if i%len(l.edges) == ei {
				srcs = append(srcs, a)
			}
		}
		c := bench.Config{URL: s.url("/"), Proto: bench.H3, Connections: len(srcs), Streams: l.streams,
			Sources: srcs, Pins: []string{s.pin}, Timeout: l.timeout}
		conns, err := bench.Dial(ctx, c)
		if err != nil {
			l.close()
			return err
		}
		l.conns = append(l.conns, conns)
		for i := range conns.Len() {
			l.clients = append(l.clients, fleetClient{conns: conns, i: i, edge: ei})
		}
		var us []*url.URL
		for _, p := range append(slices.Clone(l.paths), "/h3bench-warm-up") {
			u, err := url.Parse(s.url(p))
			if err != nil {
				l.close()
				return err
			}
			us = append(us, u)
		}
		l.urls = append(l.urls, us)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(l.clients))
	for i, c := range l.clients {
		wg.Go(func() {
			r := l.send(ctx, c, len(l.paths), time.Now())
			if r.code != http.StatusOK {
				errs[i] = fmt.Errorf("bench: warm-up request to edge %d: status %d, %v", c.edge, r.code, r.kind)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		l.close()
		return err
	}
	return nil
}

func (l *fleetLoad) close() {
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// run sends requests intended from start until end and returns their records, in
// order of intended send time.
func (l *fleetLoad) run(ctx context.Context, start, end time.Time) ([]fleetRecord, error) {
	pacer := bench.Pacer{Start: start, Rate: l.rate}
	var next atomic.Int64
	per := make([][]fleetRecord, len(l.clients)*l.streams)
	var wg sync.WaitGroup
	for w := range per {
		c := l.clients[w%len(l.clients)]
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				at := pacer.At(i)
				if !at.Before(end) || !sleep(ctx, time.Until(at)) {
					return
				}
				per[w] = append(per[w], l.send(ctx, c, int(i%int64(len(l.paths))), at))
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	var all []fleetRecord
	for _, rs := range per {
		all = append(all, rs...)
	}
	slices.SortFunc(all, func(a, b fleetRecord) int { return a.at.Compare(b.at) })
	return all, nil
}

// send makes one request to path index p (len(paths): the warm-up path) on c.
func (l *fleetLoad) send(ctx context.Context, c fleetClient, p int, at time.Time) fleetRecord {
	rec := fleetRecord{path: p, edge: c.edge, at: at}
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req := (&http.Request{
		Method: http.MethodGet, URL: l.urls[c.edge][p], Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: l.header, // shared read-only: transports do not modify request headers
	}).WithContext(rctx)
	rec.sent = time.Now()
	resp, err := c.conns.RoundTrip(c.i, req)
	if err == nil {
		if resp.StatusCode == http.StatusServiceUnavailable {
			var prob struct {
				Type string `json:"type"`
			}
			b, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			err = rerr
			rec.reduced = json.Unmarshal(b, &prob) == nil && prob.Type == headers.TemporaryReducedCapacityType
			rec.retryAfter = resp.Header.Get("Retry-After") != ""
		} else {
			_, err = io.Copy(io.Discard, resp.Body)
		}
		resp.Body.Close()
		rec.code = resp.StatusCode
	}
	rec.recv = time.Now()
	if err != nil {
		rec.code = 0
		rec.kind = bench.Classify(err)
		if errors.Is(rctx.Err(), context.DeadlineExceeded) {
			rec.kind = bench.ErrTimeout
		}
	}
	return rec
}
