package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
	"github.com/h3edge/h3edge/bench/testkit"
)

const claimBoundary = "across a window boundary fixed_window admits 2×Q within one window-length span (Q at the end of one window, Q at the start of the next), while sliding_window and token_bucket stay within their documented bounds: sliding, Q plus the previous window's excess over an even spread; token bucket, Q + Q·d/W in any span d"

// The boundary scenario's policy: Q per W for each algorithm, keyed by ip, and a client
// per algorithm sending at a steady rate far above Q/W.
const (
	boundaryQuota  = 20
	boundaryWindow = 2 * time.Second
	boundaryRate   = 200 // requests per second per client, 20× the allowed average
	boundaryPhase  = 0.75
	boundaryBin    = 100 * time.Millisecond
	// boundarySlack absorbs the access log's millisecond resolution, which can move an
	// admission across a span's edge.
	boundarySlack = 2
)

var boundaryAlgorithms = []struct {
	name, path string
	source     netip.Addr
}{
	{"fixed_window", "/fixed/", netip.MustParseAddr("127.0.0.2")},
	{"sliding_window", "/sliding/", netip.MustParseAddr("127.0.0.3")},
	{"token_bucket", "/token/", netip.MustParseAddr("127.0.0.4")},
}

// boundaryStats is what one algorithm admitted.
type boundaryStats struct {
	Algorithm string `json:"algorithm"`
	Admitted  int    `json:"admitted"`
	Denied    int    `json:"denied"`
	Other     int    `json:"other"`
	// PerWindow counts admissions per aligned window, the first one partial.
	PerWindow []int `json:"per_window"`
	// PeakWindow is the most admitted within any span of length W, PeakHalf within any
	// span of W/2.
	PeakWindow int `json:"peak_in_window_span"`
	PeakHalf   int `json:"peak_in_half_window_span"`
	// Bound is the documented bound for the span of PeakWindow (sliding_window: computed
	// from the previous window's admissions), BoundHalf for spans of W/2 where the
	// algorithm documents one.
	Bound     int    `json:"bound_window_span"`
	BoundHalf int    `json:"bound_half_window_span,omitempty"`
	Holds     bool   `json:"holds"`
	Why       string `json:"why"`
	// Bins are admissions per 100 ms from the start.
	Bins []int `json:"admitted_per_100ms"`
}

func runBoundary(ctx context.Context, e *env) (*Report, error) {
	runFor := time.Duration(4.25 * float64(boundaryWindow))
	if e.opt.Short {
		runFor = time.Duration(2.25 * float64(boundaryWindow))
	}
	// The admission instants are the edge's own: the access log's time is the instant
	// the request reached the chain, the one its decision was made at. A response's
	// arrival at the client is not: on a loaded machine the client can be descheduled
	// for hundreds of milliseconds, and responses decided in one window then arrive in
	// the next, which breaks the span bounds the limiter kept.
	logFile := filepath.Join(e.dir, "boundary-access.log")
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "access_log: {path: %q, format: json}\n", logFile)
	cfg.WriteString(ipLimitsRaised + abuseOff + "policies:\n")
	for _, a := range boundaryAlgorithms {
		fmt.Fprintf(&cfg, "  - {name: %s, match: {path_prefix: %s}, key: [ip], algorithm: %s, quota: %d, window: %v}\n",
			strings.TrimSuffix(a.name, "_window"), a.path, a.name, boundaryQuota, boundaryWindow)
	}
	edge, err := e.startH3edge(ctx, "h3edge", cfg.String())
	if err != nil {
		return nil, err
	}

	// Start at a known phase of the epoch-aligned windows, so that the first window's
	// quota is spent just before a boundary.
	start := testkit.NextPhase(time.Now().Add(300*time.Millisecond), boundaryWindow, boundaryPhase)
	e.logf("starting at %s (%.0f%% into a %v window)", start.Format("15:04:05.000"), 100*boundaryPhase, boundaryWindow)
	if !sleep(ctx, time.Until(start)) {
		return nil, context.Cause(ctx)
	}
	codes := make([]map[int]int, len(boundaryAlgorithms))
	for i := range codes {
		codes[i] = map[int]int{}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(boundaryAlgorithms))
	for i, a := range boundaryAlgorithms {
		wg.Go(func() {
			_, errs[i] = runLoad(ctx, bench.Config{
				URL: edge.url(a.path + "x"), Proto: bench.H3, Connections: 1, Streams: 8,
				Rate: boundaryRate, Duration: runFor, Timeout: 2 * time.Second,
				Sources: []netip.Addr{a.source}, Pins: []string{edge.pin},
				OnResponse: func(resp *http.Response) time.Duration {
					mu.Lock()
					codes[i][resp.StatusCode]++
					mu.Unlock()
					return 0
				},
			})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}

	admittedAt, err := boundaryAdmissions(ctx, logFile, codes)
	if err != nil {
		return nil, err
	}

	rep := &Report{Holds: true}
	var stats []boundaryStats
	ch := &chart.Chart{
		Title:  fmt.Sprintf("Admitted per 100 ms, quota %d per %v, client at %d req/s", boundaryQuota, boundaryWindow, boundaryRate),
		XLabel: "seconds from start (dashed: window boundaries)",
		YLabel: "admitted per 100 ms",
		Panels: true,
	}
	for b := boundaryWindow - time.Duration(boundaryPhase*float64(boundaryWindow)); b < runFor; b += boundaryWindow {
		ch.VLines = append(ch.VLines, chart.Marker{At: b.Seconds(), Label: "boundary"})
	}
	for i, a := range boundaryAlgorithms {
		admitted := admittedAt[i]
		st := boundaryStats{Algorithm: a.name, Denied: codes[i][http.StatusTooManyRequests]}
		for code, n := range codes[i] {
			if code != http.StatusOK && code != http.StatusTooManyRequests {
				st.Other += n
			}
		}
		analyzeBoundary(&st, admitted, start, runFor, boundaryQuota, boundaryWindow)
		stats = append(stats, st)
		rep.Holds = rep.Holds && st.Holds
		ser := chart.Series{Name: a.name, Step: true}
		for k, n := range st.Bins {
			ser.X = append(ser.X, (time.Duration(k) * boundaryBin).Seconds())
			ser.Y = append(ser.Y, float64(n))
		}
		ser.X = append(ser.X, runFor.Seconds())
		ser.Y = append(ser.Y, ser.Y[len(ser.Y)-1])
		ch.Series = append(ch.Series, ser)
		if st.Other > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d responses or errors other than 200 and 429", a.name, st.Other))
		}
	}
	rep.Chart = ch
	rep.Table = [][]string{{"algorithm", "admitted", "429", "per window", "peak in W/2", "peak in W", "bound in W", "ok"}}
	var verdicts []string
	for _, st := range stats {
		rep.Table = append(rep.Table, []string{
			st.Algorithm, fmt.Sprint(st.Admitted), fmt.Sprint(st.Denied), fmt.Sprint(st.PerWindow),
			fmt.Sprint(st.PeakHalf), fmt.Sprint(st.PeakWindow), fmt.Sprint(st.Bound), okMark(st.Holds),
		})
		verdicts = append(verdicts, st.Algorithm+": "+st.Why)
	}
	rep.Verdict = strings.Join(verdicts, "; ")
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("Q=%d, W=%v, keyed by ip, one h3 client per algorithm at %d req/s open loop, started %.0f%% into a window, run %v; times are the edge's (its access log, to the millisecond), with a slack of %d admissions",
			boundaryQuota, boundaryWindow, boundaryRate, 100*boundaryPhase, runFor, boundarySlack))
	rep.Figures = struct {
		Quota         int             `json:"quota"`
		WindowSeconds float64         `json:"window_seconds"`
		Rate          int             `json:"rate"`
		Algorithms    []boundaryStats `json:"algorithms"`
	}{boundaryQuota, boundaryWindow.Seconds(), boundaryRate, stats}
	return rep, nil
}

// boundaryAdmissions reads the admission instants of each algorithm from the edge's
// access log, once it holds every 200 the clients saw (it writes lines in batches).
func boundaryAdmissions(ctx context.Context, logFile string, codes []map[int]int) ([][]time.Time, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := readBoundaryLog(logFile)
		if err != nil {
			return nil, err
		}
		complete := true
		for i := range boundaryAlgorithms {
			complete = complete && len(got[i]) >= codes[i][http.StatusOK]
		}
		if complete {
			return got, nil
		}
		if time.Now().After(deadline) {
			for i, a := range boundaryAlgorithms {
				if len(got[i]) < codes[i][http.StatusOK] {
					return nil, fmt.Errorf("access log %s holds %d admissions for %s after 5s, the client saw %d", logFile, len(got[i]), a.name, codes[i][http.StatusOK])
				}
			}
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return nil, context.Cause(ctx)
		}
	}
}

// readBoundaryLog returns the times of the access log's 200 lines per algorithm, by path.
func readBoundaryLog(logFile string) ([][]time.Time, error) {
	data, err := os.ReadFile(logFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	got := make([][]time.Time, len(boundaryAlgorithms))
	for line := range bytes.Lines(data) {
		var l struct {
			Time   time.Time `json:"time"`
			Path   string    `json:"path"`
			Status int       `json:"status"`
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			break // a line still being written
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("access log %s: %v", logFile, err)
		}
		if l.Status != http.StatusOK {
			continue
		}
		for i, a := range boundaryAlgorithms {
			if strings.HasPrefix(l.Path, a.path) {
				got[i] = append(got[i], l.Time)
			}
		}
	}
	return got, nil
}

// analyzeBoundary fills st from the admission instants of one algorithm, for a run from
// start lasting runFor, and checks the algorithm's documented bound.
func analyzeBoundary(st *boundaryStats, admitted []time.Time, start time.Time, runFor time.Duration, q int, w time.Duration) {
	slices.SortFunc(admitted, func(a, b time.Time) int { return a.Compare(b) })
	st.Admitted = len(admitted)
	st.Bins = make([]int, int(math.Ceil(float64(runFor)/float64(boundaryBin))))
	first := windowStart(start, w)
	st.PerWindow = make([]int, int((start.Add(runFor).Sub(first)+w-1)/w))
	for _, t := range admitted {
		if k := int(t.Sub(start) / boundaryBin); k >= 0 && k < len(st.Bins) {
			st.Bins[k]++
		}
		if k := int(t.Sub(first) / w); k >= 0 && k < len(st.PerWindow) {
			st.PerWindow[k]++
		}
	}
	st.PeakWindow = peakIn(admitted, w)
	st.PeakHalf = peakIn(admitted, w/2)
	switch st.Algorithm {
	case "fixed_window":
		// Documented: each aligned window at most Q; 2×Q can pass within W across a
		// boundary. The scenario shows it: the peak must come close to 2×Q.
		st.Bound = 2 * q
		over := slices.Max(st.PerWindow)
		st.Holds = over <= q+boundarySlack/2 && st.PeakWindow <= 2*q+boundarySlack/2 && st.PeakWindow >= 2*q-boundarySlack
		st.Why = fmt.Sprintf("peak %d in a W span (2×Q = %d), %d in W/2, at most %d per aligned window", st.PeakWindow, 2*q, st.PeakHalf, over)
	case "token_bucket":
		// Documented: it admits what x/time/rate admits with burst Q and rate Q/W: at most
		// Q + Q·d/W (+1 for the token accrued while the span opens) within any span d.
		st.Bound = 2*q + 1
		st.BoundHalf = q + q/2 + 1
		st.Holds = st.PeakWindow <= st.Bound+boundarySlack && st.PeakHalf <= st.BoundHalf+boundarySlack
		st.Why = fmt.Sprintf("peak %d in W ≤ %d, %d in W/2 ≤ %d", st.PeakWindow, st.Bound, st.PeakHalf, st.BoundHalf)
	case "sliding_window":
		// Documented: within any span [a, a+W) it admits at most Q plus the excess of
		// the admissions of a's window that fall after a over an even spread of them.
		worst, worstBound := 0, 0
		slack := math.MaxInt
		for i, a := range admitted {
			n := countIn(admitted[i:], a.Add(w))
			b := slidingBound(admitted, a, q, w)
			if b-n < slack {
				slack, worst, worstBound = b-n, n, b
			}
		}
		st.Bound = worstBound
		if len(admitted) == 0 {
			st.Bound = q
		}
		st.Holds = slack >= -boundarySlack
		st.Why = fmt.Sprintf("peak %d in W, tightest span %d ≤ bound %d; %d in W/2", st.PeakWindow, worst, worstBound, st.PeakHalf)
	}
}

// windowStart returns the start of t's window of length w, aligned to the Unix epoch as
// h3edge aligns fixed and sliding windows (time.Truncate aligns to year 1 instead).
func windowStart(t time.Time, w time.Duration) time.Time {
	ns := t.UnixNano()
	return time.Unix(0, ns-ns%int64(w))
}

// slidingBound is sliding_window's documented bound for the span [a, a+W): Q plus the
// admissions of a's aligned window at or after a, less what an even spread of that
// window's admissions would put there.
func slidingBound(admitted []time.Time, a time.Time, q int, w time.Duration) int {
	ws := windowStart(a, w)
	we := ws.Add(w)
	var total, after int
	for _, t := range admitted {
		if !t.Before(ws) && t.Before(we) {
			total++
			if !t.Before(a) {
				after++
			}
		}
	}
	even := float64(total) * float64(we.Sub(a)) / float64(w)
	return q + int(math.Ceil(max(float64(after)-even, 0)))
}

// peakIn returns the most instants of sorted ts within any half-open span of length d.
func peakIn(ts []time.Time, d time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j].Sub(ts[i]) < d {
			j++
		}
		best = max(best, j-i)
	}
	return best
}

// countIn counts the leading instants of sorted ts before end.
func countIn(ts []time.Time, end time.Time) int {
	n, _ := slices.BinarySearchFunc(ts, end, func(t, e time.Time) int { return t.Compare(e) })
	return n
}
