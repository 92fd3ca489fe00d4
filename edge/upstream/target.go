package upstream

import (
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// target is one origin of a pool and what the pool knows of it: its health, its
// load, its recent latency and its counters.
type target struct {
	index  int
	url    *url.URL // as configured (h2c:// shown as such)
	dial   url.URL  // what requests are sent to: h2c becomes http
	key    string   // scheme://host, the target label of the metrics
	weight int
	rt     Transport
	probe  Transport // the health checks', nil without them: its own connection, outside max_connections' queue
	hash   uint64    // of key, for rendezvous hashing

	inflight atomic.Int64
	// activeDown is set while active checks fail (Unhealthy in a row, until Healthy
	// in a row); ejectedUntil (UnixNano) while passive ejection lasts; probation from
	// an ejection until the next success.
	activeDown   atomic.Bool
	ejectedUntil atomic.Int64
	probation    atomic.Bool
	// failing is set while failures holds any: a success then takes mu to clear them.
	failing atomic.Bool

	// mu guards the failure times of passive ejection, the active checks' runs and
	// the latency ring.
	mu        sync.Mutex
	failures  []int64 // UnixNano of the failures since the last success, oldest first, at most Passive.Failures
	checkRun  int     // > 0: successes in a row; < 0: failures in a row
	latencies [latencyRing]time.Duration
	latN      int // latencies recorded, ever

	stats *targetStats // shared with the target it replaces across a reload (inherit)
}

// latencyRing is how many recent response times a target keeps for its p99.
const latencyRing = 512

func newTarget(i int, t Target, rt Transport) *target {
	dial := *t.URL
	if dial.Scheme == "h2c" {
		dial.Scheme = "http"
	}
	key := t.URL.Scheme + "://" + t.URL.Host
	return &target{index: i, url: t.URL, dial: dial, key: key, weight: t.Weight, rt: rt, hash: hash64(key), stats: new(targetStats)}
}

// inherit gives t, not serving yet, o's latencies and counters (shared), and its active checks'
// verdict (checks) and passive ejection (failures > 0: the failures that eject here).
func (t *target) inherit(o *target, checks bool, failures int) {
	o.mu.Lock()
	if checks {
		t.activeDown.Store(o.activeDown.Load())
		t.checkRun = o.checkRun
	}
	if failures > 0 {
		t.ejectedUntil.Store(o.ejectedUntil.Load())
		t.probation.Store(o.probation.Load())
		t.failures = append([]int64(nil), o.failures[max(len(o.failures)-failures, 0):]...)
		t.failing.Store(len(t.failures) > 0)
	}
	t.latencies, t.latN = o.latencies, o.latN
	o.mu.Unlock()
	// The counters are o's, not a copy: the requests still finishing on o count
	// where the status and metrics read them.
	t.stats = o.stats
}

// available reports whether the target may be sent requests now.
func (t *target) available(now int64) bool {
	return !t.activeDown.Load() && now >= t.ejectedUntil.Load()
}

// State names the target's health in the status: "healthy", "ejected" (out of
// rotation: ejected, or failing its health checks) or "checking" (an ejection ended
// and the next outcome decides, or checks failing below the threshold).
func (t *target) state(now int64) string {
	switch {
	case !t.available(now):
		return "ejected"
	case t.probation.Load():
		return "checking"
	}
	t.mu.Lock()
	run := t.checkRun
	t.mu.Unlock()
	if run < 0 {
		return "checking"
	}
	return "healthy"
}

// observe records one response time.
func (t *target) observe(d time.Duration) {
	t.mu.Lock()
	t.latencies[t.latN%latencyRing] = d
	t.latN++
	t.mu.Unlock()
}

// p99 is the 99th percentile of the recent response times, 0 without any.
func (t *target) p99() time.Duration {
	t.mu.Lock()
	n := min(t.latN, latencyRing)
	ds := slices.Clone(t.latencies[:n])
	t.mu.Unlock()
	if n == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(n*99+99)/100-1]
}

// fail records a failed request (connect error, timeout, reset, 502, 503, 504) at now
// and reports whether it ejected the target: Passive.Failures of them in a row (no
// success between) within Passive.Within.
func (t *target) fail(p Passive, now int64) bool {
	if p.Failures <= 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if now < t.ejectedUntil.Load() {
		return false // already out
	}
	if t.probation.Load() {
		// Back from an ejection, failed again: out again at once.
		t.ejectedUntil.Store(now + int64(p.Eject))
		t.failures = t.failures[:0]
		return true
	}
	cut := now - int64(p.Within)
	i := 0
	for i < len(t.failures) && t.failures[i] < cut {
		i++
	}
	t.failures = append(t.failures[:0], t.failures[i:]...)
	t.failures = append(t.failures, now)
	if len(t.failures) < p.Failures {
		t.failing.Store(true)
		return false
	}
	t.failures = t.failures[:0]
	t.failing.Store(false)
	t.ejectedUntil.Store(now + int64(p.Eject))
	t.probation.Store(true)
	return true
}

// succeed records a successful request or check at now and reports whether it ended
// the target's probation. It clears the failures counted toward an ejection: they
// must come in a row.
func (t *target) succeed(now int64) bool {
	if t.failing.Load() {
		t.mu.Lock()
		t.failures = t.failures[:0]
		t.failing.Store(false)
		t.mu.Unlock()
	}
	if !t.probation.Load() || now < t.ejectedUntil.Load() {
		return false
	}
	return t.probation.CompareAndSwap(true, false)
}
