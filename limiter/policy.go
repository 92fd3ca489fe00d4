package limiter

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"time"
)

// Algorithm names a rate-limit algorithm, spelled as in the configuration file.
type Algorithm string

// The algorithms. Each keeps a few integers per key; see the step functions in step.go.
const (
	// TokenBucket holds up to Quota tokens, starts full and refills Quota per Window,
	// evenly. It admits exactly what golang.org/x/time/rate.Limiter.AllowN admits with
	// rate Quota/Window and burst Quota, including that limiter's rounding: a request
	// less than one nanosecond early is admitted. A denied request takes nothing.
	TokenBucket Algorithm = "token_bucket"
	// GCRA is the generic cell rate algorithm: units arrive at Quota per Window, up to
	// Burst back to back. It is the token bucket seen from the other side (a theoretical
	// arrival time instead of a token count); with Burst = Quota it admits exactly what
	// TokenBucket admits.
	GCRA Algorithm = "gcra"
	// FixedWindow counts units per window aligned to the Unix epoch (a 24h window resets
	// at 00:00 UTC). Beware: a client can spend Quota at the end of one window and Quota
	// again at the start of the next, so up to 2×Quota pass within one Window.
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindow counts units per aligned window and weighs the previous window's
	// count by how much of it the sliding window still covers. It assumes the previous
	// window's traffic was spread evenly; in any interval of length Window it admits at
	// most Quota plus that traffic's excess over an even spread, which is below Quota
	// (all of it at the very end) and O(√Quota) for random traffic.
	SlidingWindow Algorithm = "sliding_window"
	// SlidingLog keeps the instant of every admitted unit and admits while fewer than
	// Quota fall within the last Window: exact in every interval, at 8 bytes per unit
	// per key (Quota is limited to MaxLogQuota).
	SlidingLog Algorithm = "sliding_log"
	// LeakyBucket shapes traffic: unit slots are spaced Window/Quota apart and each
	// request takes the next free slots. A request whose first slot starts within
	// MaxDelay is admitted with Delay set to the wait; later ones are denied. With
	// MaxDelay 0 admissions are at least Window/Quota apart and never bunch.
	LeakyBucket Algorithm = "leaky_bucket"
	// Concurrency counts units in flight, at most Quota; Window is not used. Units are
	// acquired by Decide and given back by Release.
	Concurrency Algorithm = "concurrency"
)

// MaxLogQuota bounds a sliding_log policy's Quota, and with it the memory per key.
const MaxLogQuota = 1 << 16

// maxWindow bounds a policy's Window (and MaxDelay), so that instants a few windows
// ahead never overflow.
const maxWindow = 10 * 366 * 24 * time.Hour

// maxUnits bounds every scaled quantity the step functions compute, so int64 never
// overflows and a Lua script, whose numbers are doubles, can mirror the arithmetic
// exactly (integers up to 2^53 are exact in a double).
const maxUnits = 1 << 53

// ErrInvalidPolicy is wrapped by every error of NewPolicy and Policy.Validate.
var ErrInvalidPolicy = errors.New("limiter: invalid policy")

// Policy is a rate limit: Quota units per Window under an Algorithm. Make one with
// NewPolicy, which validates it and derives what the algorithms need, and do not change
// it afterwards (make a new one). A Policy is safe for concurrent use.
//
// Two policies with the same Name and parameters share their keys' state in a Store:
// reloading an unchanged configuration keeps every client's state.
type Policy struct {
	// Name identifies the policy in fields, metrics and logs. Required.
	Name string
	// Algorithm decides how units are counted. If empty, TokenBucket is used.
	Algorithm Algorithm
	// Quota is the units per Window; for TokenBucket also the bucket's capacity, for
	// Concurrency the units in flight. Required, > 0; at most MaxLogQuota for SlidingLog.
	Quota int64
	// Window is the period Quota refers to. Required, > 0 and at most ten years, except
	// for Concurrency, which ignores it.
	Window time.Duration
	// Burst (GCRA only) is how many units may pass back to back. If zero, Quota is
	// used; at most Quota.
	Burst int64
	// MaxDelay (LeakyBucket only) is how long a request may be held waiting for its slot
	// instead of being denied. If zero, requests are never delayed; at most ten years.
	MaxDelay time.Duration

	kind  kind
	id    uint64 // identity of the policy's state: a hash of Name and parameters
	stats *stats

	// Bucket family (token_bucket, gcra, leaky_bucket): time is counted in ticks of
	// tick ns and backlog in units, where one tick drains perTick units and one unit of
	// quota is perUnit units, both exact integers (see derive).
	tick     int64
	perTick  int64
	perUnit  int64
	capUnits int64 // token_bucket, gcra: the bucket's capacity, burst×perUnit
	delayMax int64 // leaky_bucket: MaxDelay in units
	drainAll int64 // ticks after which any backlog has drained
	burst    int64 // token_bucket, gcra: capacity in units of quota
	// sliding_window: the window in ticks.
	windowTicks int64
}

type kind uint8

const (
	kindInvalid kind = iota
	kindBucket       // token_bucket, gcra
	kindLeaky
	kindFixed
	kindSliding
	kindLog
	kindConcurrency
)

// NewPolicy returns a validated copy of p, with defaults applied, ready for use.
func NewPolicy(p Policy) (*Policy, error) {
	if err := p.derive(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate reports whether NewPolicy would accept p.
func (p Policy) Validate() error {
	return p.derive()
}

// String returns the policy's name.
func (p *Policy) String() string { return p.Name }

func (p *Policy) fail(format string, args ...any) error {
	return fmt.Errorf("%w %q: %s", ErrInvalidPolicy, p.Name, fmt.Sprintf(format, args...))
}

// derive applies defaults, validates and computes the unexported fields.
func (p *Policy) derive() error {
	if p.Name == "" {
		return p.fail("name is required")
	}
	if p.Algorithm == "" {
		p.Algorithm = TokenBucket
	}
	var k kind
	switch p.Algorithm {
	case TokenBucket, GCRA:
		k = kindBucket
	case LeakyBucket:
		k = kindLeaky
	case FixedWindow:
		k = kindFixed
	case SlidingWindow:
		k = kindSliding
	case SlidingLog:
		k = kindLog
	case Concurrency:
		k = kindConcurrency
	default:
		return p.fail("unknown algorithm %q", p.Algorithm)
	}
	switch {
	case p.Quota <= 0:
		return p.fail("quota must be > 0")
	case k != kindConcurrency && (p.Window <= 0 || p.Window > maxWindow):
		return p.fail("window must be > 0 and at most %v", maxWindow)
	case p.Burst != 0 && p.Algorithm != GCRA:
		return p.fail("burst applies to gcra only")
	case p.Burst < 0 || p.Burst > p.Quota:
		return p.fail("burst must be between 0 and quota")
	case p.MaxDelay != 0 && k != kindLeaky:
		return p.fail("max_delay applies to leaky_bucket only")
	case p.MaxDelay < 0 || p.MaxDelay > maxWindow:
		return p.fail("max_delay must be between 0 and %v", maxWindow)
	case k == kindLog && p.Quota > MaxLogQuota:
		return p.fail("sliding_log quota must be at most %d", MaxLogQuota)
	}
	p.kind = k
	if p.Algorithm == GCRA && p.Burst == 0 {
		p.Burst = p.Quota
	}
	p.burst = p.Quota
	if p.Burst != 0 {
		p.burst = p.Burst
	}
	switch k {
	case kindBucket, kindLeaky:
		if !p.scaleBucket() {
			return p.fail("quota %d per %v is too large to count exactly", p.Quota, p.Window)
		}
	case kindSliding:
		if !p.scaleSliding() {
			return p.fail("quota %d per %v is too large to count exactly", p.Quota, p.Window)
		}
	}
	p.id = p.identity()
	if p.stats == nil {
		p.stats = new(stats)
	}
	return nil
}

// scaleBucket chooses the bucket family's units. The backlog drains at Quota units of
// quota per Window: Quota/Window per tick, generally a fraction. With g = gcd(Quota,
// window in ticks), counting one unit of quota as perUnit = windowTicks/g units makes
// one tick drain perTick = Quota/g units exactly. The tick is 1 ns unless the units
// would exceed maxUnits; then it is the smallest power of ten that divides the window
// and keeps them in range (only for large quotas over long windows: 1 GiB per day
// counts in milliseconds). Quotas beyond that (about 2^53 ÷ window in seconds) are
// rejected.
func (p *Policy) scaleBucket() bool {
	for tick := int64(1); tick <= int64(time.Second); tick *= 10 {
		w := int64(p.Window)
		if w%tick != 0 {
			return false
		}
		wt := w / tick
		g := gcd(p.Quota, wt)
		perTick, perUnit := p.Quota/g, wt/g
		if perUnit > maxUnits/p.Quota {
			continue
		}
		delayTicks := int64(p.MaxDelay) / tick
		if delayTicks > maxUnits/perTick {
			continue
		}
		p.tick, p.perTick, p.perUnit = tick, perTick, perUnit
		p.capUnits = p.burst * perUnit
		p.delayMax = delayTicks * perTick
		// Backlog never exceeds delayMax + Quota×perUnit + perTick < 2^55.
		p.drainAll = (1 << 55) / perTick
		return true
	}
	return false
}

// scaleSliding chooses the sliding window's tick: Quota×windowTicks must stay within
// maxUnits, since the previous count is weighed in ticks of the window.
func (p *Policy) scaleSliding() bool {
	for tick := int64(1); tick <= int64(time.Second); tick *= 10 {
		w := int64(p.Window)
		if w%tick != 0 {
			return false
		}
		if wt := w / tick; wt <= maxUnits/p.Quota {
			p.tick, p.windowTicks = tick, wt
			return true
		}
	}
	return false
}

// identity hashes what gives the state its meaning. A concurrency policy's state is
// the units held, whatever the quota: a policy of the same name with another quota
// shares it, so that the requests in flight when a reload changes the quota still
// count against the new one (and give their units back to it).
func (p *Policy) identity() uint64 {
	h := fnv.New64a()
	if p.kind == kindConcurrency {
		fmt.Fprintf(h, "%s\x00%s", p.Name, p.Algorithm)
	} else {
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%d\x00%d", p.Name, p.Algorithm, p.Quota, p.Window, p.Burst, p.MaxDelay)
	}
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Stats counts one policy's decisions since NewPolicy made it.
type Stats struct {
	// Allowed counts requests admitted and charged.
	Allowed uint64
	// Denied counts requests this policy denied.
	Denied uint64
	// Vetoed counts requests this policy would have admitted but another policy in the
	// same batch denied; they were not charged.
	Vetoed uint64
}

// Stats returns the policy's counters. They are read one stripe at a time, so a
// snapshot taken under load may be a few decisions apart between fields.
func (p *Policy) Stats() Stats {
	var s Stats
	if p.stats == nil {
		return s
	}
	for i := range p.stats {
		c := &p.stats[i]
		s.Allowed += c.allowed.Load()
		s.Denied += c.denied.Load()
		s.Vetoed += c.vetoed.Load()
	}
	return s
}

// stats are a policy's counters, striped by key so that cores deciding for different
// keys do not contend on one cache line.
type stats [16]struct {
	allowed, denied, vetoed atomic.Uint64
	_                       [40]byte
}

// Record counts the decisions of one batch: out holds one decision per request of reqs
// and allowed is the batch's verdict. Every Store calls it once per batch.
func Record(reqs []Request, out []Decision, allowed bool) {
	for i := range reqs {
		if p := reqs[i].Policy; p != nil && i < len(out) {
			p.count(keyHash(fold(&reqs[i].Key)), allowed, out[i].Allowed)
		}
	}
}

// count counts one decision: allowed is the batch's verdict, passed this policy's,
// and hash, some hash of the key, picks the stripe.
func (p *Policy) count(hash uint64, allowed, passed bool) {
	if p.stats == nil {
		return
	}
	c := &p.stats[hash>>40&15]
	switch {
	case allowed:
		c.allowed.Add(1)
	case passed:
		c.vetoed.Add(1)
	default:
		c.denied.Add(1)
	}
}
