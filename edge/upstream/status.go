package upstream

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"
)

// DurationBuckets are the upper bounds, in seconds, of Stats.Duration's buckets.
var DurationBuckets = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

var durationBounds = func() (b [len(DurationBuckets)]time.Duration) {
	for i, s := range DurationBuckets {
		b[i] = time.Duration(s * float64(time.Second))
	}
	return b
}()

// histogram counts durations with integer atomics.
type histogram struct {
	counts [len(DurationBuckets) + 1]atomic.Uint64 // per bucket; the last is +Inf
	sum    atomic.Int64                            // nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(durationBounds) && d > durationBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// poolStats are a pool's counters.
type poolStats struct {
	retries  atomic.Uint64
	duration histogram
}

// Status codes counted per target without a lookup.
const (
	minCode = 100
	maxCode = 599
)

// targetStats are a target's counters: responses by status code, and tries that got
// no response.
type targetStats struct {
	codes  [maxCode - minCode + 2]atomic.Uint64 // the last: codes out of range
	errors atomic.Uint64
}

func (s *targetStats) count(code int) {
	if code < minCode || code > maxCode {
		s.codes[len(s.codes)-1].Add(1)
		return
	}
	s.codes[code-minCode].Add(1)
}

// Stats is a snapshot of a pool's state and counters, for metrics and the admin API.
type Stats struct {
	Name    string        `json:"name"`
	Balance string        `json:"balance"`
	Targets []TargetStats `json:"targets"`
	// Retries counts the tries after a request's first.
	Retries uint64 `json:"retries"`
	// Duration counts the tries that got a response header, by how long that took:
	// Duration[i] up to DurationBuckets[i] (not cumulative), the last beyond them.
	Duration    []uint64      `json:"-"`
	DurationSum time.Duration `json:"-"`
}

// TargetStats is one target's part of Stats.
type TargetStats struct {
	URL    string `json:"url"`
	Weight int    `json:"weight"`
	// State is "healthy", "ejected" (out of rotation) or "checking" (back from an
	// ejection until the next outcome, or failing checks below the threshold).
	State    string `json:"state"`
	Healthy  bool   `json:"healthy"` // in rotation
	InFlight int64  `json:"in_flight"`
	// P99 is the 99th percentile of the last 512 response times, in milliseconds.
	P99 float64 `json:"p99_ms"`
	// Codes counts responses by status code; Errors tries that got none.
	Codes  map[int]uint64 `json:"codes"`
	Errors uint64         `json:"errors"`
}

// Stats returns a snapshot of the pool.
func (p *Pool) Stats() Stats {
	now := time.Now().UnixNano()
	s := Stats{Name: p.cfg.Name, Balance: p.cfg.Balance.String(), Retries: p.stats.retries.Load()}
	for i := range p.stats.duration.counts {
		s.Duration = append(s.Duration, p.stats.duration.counts[i].Load())
	}
	s.DurationSum = time.Duration(p.stats.duration.sum.Load())
	for _, t := range p.targets {
		ts := TargetStats{
			URL: t.key, Weight: t.weight, State: t.state(now), Healthy: t.available(now),
			InFlight: t.inflight.Load(), P99: float64(t.p99()) / float64(time.Millisecond),
			Codes: map[int]uint64{}, Errors: t.stats.errors.Load(),
		}
		for i := range t.stats.codes {
			if n := t.stats.codes[i].Load(); n > 0 {
				code := minCode + i
				if i == len(t.stats.codes)-1 {
					code = 0
				}
				ts.Codes[code] = n
			}
		}
		s.Targets = append(s.Targets, ts)
	}
	return s
}

// StatusHandler serves GET /api/v1/upstreams: {"upstreams": [Stats…]} of the pools
// pools returns, in its order.
func StatusHandler(pools func() []*Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		out := struct {
			Upstreams []Stats `json:"upstreams"`
		}{Upstreams: []Stats{}}
		for _, p := range pools() {
			out.Upstreams = append(out.Upstreams, p.Stats())
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(out)
	})
}
