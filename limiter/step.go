package limiter

import (
	"math"
	"time"
)

// state is one key's state under one policy: a few integers whose meaning depends on
// the algorithm. The zero state is that of a key never seen.
//
//	algorithm                    t                        n                    p
//	token_bucket, gcra, leaky    last update, in ticks    backlog, in units    -
//	fixed_window                 window start, ns         units this window    -
//	sliding_window               window start, ns         units this window    units last window
//	sliding_log                  ring index of oldest     instants in ring     units pending
//	concurrency                  -                        units held           -
//
// Backlog is the bucket family's single quantity: for token_bucket and gcra it is how
// far the bucket is below full (tokens = capacity − backlog), for leaky_bucket how much
// work is queued ahead of the next slot. It drains by perTick units per tick.
type state struct {
	t, n, p int64
}

// step decides cost units at instant now (ns) for a key in state *s: it writes the
// verdict to *d and advances *s to the state to store if the request is charged. The
// caller passes a copy of the stored state and keeps it only when charging, so a step
// has no other effect: sliding_log only reads ring, the key's log of admitted instants.
// (Pointers rather than results, because copying an 80-byte result through the calls
// costs more than the decision itself.)
func (p *Policy) step(s *state, ring []int64, now, cost int64, d *Decision) {
	*d = Decision{Allowed: true, Limit: p.Quota, Policy: p}
	switch p.kind {
	case kindBucket:
		p.bucket(s, now, cost, d)
	case kindLeaky:
		p.leaky(s, now, cost, d)
	case kindFixed:
		p.fixed(s, now, cost, d)
	case kindSliding:
		p.sliding(s, now, cost, d)
	case kindLog:
		p.log(s, ring, now, cost, d)
	default:
		p.concurrency(s, cost, d)
	}
}

// bucket is token_bucket and gcra. A request is admitted if the bucket holds cost
// tokens, or will in less than one tick (one nanosecond unless the policy needed a
// coarser tick): x/time/rate truncates its wait to whole nanoseconds and admits when
// that is zero, and this mirrors it so both admit the same requests. The difference
// only shows when a token takes a fractional number of nanoseconds to refill.
func (p *Policy) bucket(s *state, now, cost int64, d *Decision) {
	nt := p.ticks(now)
	p.drain(s, nt)
	switch {
	case cost == 0:
	case cost > p.burst:
		d.Allowed, d.RetryAfter = false, Never
	default:
		short := s.n + cost*p.perUnit - p.capUnits // units missing for this cost
		if short < p.perTick {
			s.n += cost * p.perUnit
		} else {
			d.Allowed = false
			d.RetryAfter = p.untilTick(nt+p.ticksFloor(short), now)
		}
	}
	// Remaining is the largest cost that would be allowed now, with the same rounding:
	// c such that c×perUnit − avail < perTick. It rises when avail next reaches that
	// for c+1.
	avail := p.capUnits - s.n
	if lenient := avail + p.perTick - 1; lenient > 0 {
		d.Remaining = min(lenient/p.perUnit, p.burst)
	}
	if d.Remaining < p.burst {
		need := (d.Remaining+1)*p.perUnit - p.perTick + 1 - avail
		d.ResetAfter = p.untilTick(nt+p.ticksCeil(need), now)
	}
}

// leaky is leaky_bucket. The backlog is the work queued ahead of the next free slot, so
// the next request would start after backlog/perTick ticks; it is admitted if that
// delay is within MaxDelay.
func (p *Policy) leaky(s *state, now, cost int64, d *Decision) {
	nt := p.ticks(now)
	p.drain(s, nt)
	switch {
	case cost == 0:
	case cost > p.Quota:
		d.Allowed, d.RetryAfter = false, Never
	case s.n <= p.delayMax:
		d.Delay = p.untilTick(nt+p.ticksCeil(s.n), now)
		s.n += cost * p.perUnit
	default:
		d.Allowed = false
		d.RetryAfter = p.untilTick(nt+p.ticksCeil(s.n-p.delayMax), now)
	}
	// Remaining: how many one-unit requests would still be admitted now, back to back.
	if s.n <= p.delayMax {
		d.Remaining = min((p.delayMax-s.n)/p.perUnit+1, p.Quota)
	}
	// It rises when the backlog drains to the level that lets one more in.
	if level := p.delayMax - d.Remaining*p.perUnit; s.n > 0 && d.Remaining < p.Quota && level >= 0 {
		d.ResetAfter = p.untilTick(nt+p.ticksCeil(s.n-level), now)
	}
}

// drain advances a bucket-family state to tick nt. A tick earlier than the state's
// (a clock stepping back) drains nothing.
func (p *Policy) drain(s *state, nt int64) {
	if nt <= s.t {
		return
	}
	if e := nt - s.t; e >= p.drainAll || e*p.perTick >= s.n {
		s.n = 0
	} else {
		s.n -= e * p.perTick
	}
	s.t = nt
}

// fixed is fixed_window. Windows are aligned to the Unix epoch, so every edge agrees
// on them. Up to 2×Quota can pass across a boundary: Quota just before and Quota just
// after.
func (p *Policy) fixed(s *state, now, cost int64, d *Decision) {
	w := int64(p.Window)
	if start := windowOf(now, s.t, w); start > s.t {
		*s = state{t: start}
	}
	switch {
	case cost == 0:
	case cost > p.Quota:
		d.Allowed, d.RetryAfter = false, Never
	case s.n+cost <= p.Quota:
		s.n += cost
	default:
		d.Allowed = false
		d.RetryAfter = until(s.t+w, now)
	}
	d.Remaining = p.Quota - s.n
	if s.n > 0 {
		d.ResetAfter = until(s.t+w, now)
	}
}

// sliding is sliding_window. The estimate of units in the last Window is
//
//	current + previous × (ticks left in the current window) / (ticks per window)
//
// and a request is admitted if the estimate plus its cost is at most Quota. Compared in
// integers multiplied by windowTicks, so it is exact; the elapsed part of the window is
// rounded down to whole ticks, which can only overestimate.
func (p *Policy) sliding(s *state, now, cost int64, d *Decision) {
	w, wt, q := int64(p.Window), p.windowTicks, p.Quota
	if start := windowOf(now, s.t, w); start > s.t {
		if start == s.t+w {
			*s = state{t: start, p: s.n}
		} else {
			*s = state{t: start}
		}
	}
	rest := wt - p.ticks(max(now-s.t, 0)) // ticks left in the window, 1..wt
	switch {
	case cost == 0:
	case cost > q:
		d.Allowed, d.RetryAfter = false, Never
	case s.p*rest+(s.n+cost)*wt <= q*wt:
		s.n += cost
	case s.n+cost <= q:
		// The previous window's weight must fall: s.p×rest ≤ (q−n−cost)×wt.
		d.Allowed = false
		d.RetryAfter = until(s.t+(wt-(q-s.n-cost)*wt/s.p)*p.tick, now)
	default:
		// Only in the next window, once this one's count weighs little enough.
		d.Allowed = false
		d.RetryAfter = until(s.t+w+(wt-(q-cost)*wt/s.n)*p.tick, now)
	}
	var prev int64 // the previous window's share, rounded up
	if s.p > 0 {
		prev = ceilDiv(s.p*rest, wt)
	}
	d.Remaining = max(q-s.n-prev, 0)
	switch {
	case prev > 0: // rises when the previous window's share drops by one
		d.ResetAfter = until(s.t+(wt-(prev-1)*wt/s.p)*p.tick, now)
	case s.n > 0: // or, next window, when this one's share first drops
		d.ResetAfter = until(s.t+w+(wt-(s.n-1)*wt/s.n)*p.tick, now)
	}
}

// log is sliding_log: admitted while fewer than Quota instants fall within the last
// Window, i.e. are later than now−Window. The ring holds the admitted instants in order,
// one per unit; s.t indexes the oldest and s.n counts them. Units decided earlier in the
// same batch are pending in s.p: not in the ring yet, all at now.
func (p *Policy) log(s *state, ring []int64, now, cost int64, d *Decision) {
	mask := int64(len(ring) - 1)
	for cut := now - int64(p.Window); s.n > 0 && ring[s.t&mask] <= cut; {
		s.t, s.n = s.t+1, s.n-1
	}
	// at returns the i-th oldest instant, counting pending units last.
	at := func(i int64) int64 {
		if i < s.n {
			return ring[(s.t+i)&mask]
		}
		return now
	}
	live := s.n + s.p
	switch {
	case cost == 0:
	case cost > p.Quota:
		d.Allowed, d.RetryAfter = false, Never
	case live+cost <= p.Quota:
		s.p += cost
		live += cost
	default:
		// Wait until enough of the oldest leave the window.
		d.Allowed = false
		d.RetryAfter = until(at(live+cost-p.Quota-1)+int64(p.Window), now)
	}
	d.Remaining = p.Quota - live
	if live > 0 {
		d.ResetAfter = until(at(0)+int64(p.Window), now)
	}
}

// logAppend charges cost units at now to an entry's log: it drops the instants that
// left the window and appends cost copies of now, growing the ring when needed. An
// instant earlier than the newest logged (a clock stepping back) is logged as the
// newest, so the ring stays in order.
func (p *Policy) logAppend(e *entry, now, cost int64) {
	s := e.state
	if s.n > 0 {
		now = max(now, e.log[(s.t+s.n-1)&int64(len(e.log)-1)]) // keep the ring in order
	}
	for cut := now - int64(p.Window); s.n > 0 && e.log[s.t&int64(len(e.log)-1)] <= cut; {
		s.t, s.n = s.t+1, s.n-1
	}
	if need := s.n + cost; need > int64(len(e.log)) {
		size := max(int64(len(e.log)), 4)
		for size < need {
			size *= 2
		}
		grown := make([]int64, size)
		for i := range s.n {
			grown[i] = e.log[(s.t+i)&int64(len(e.log)-1)]
		}
		e.log, s.t = grown, 0
	}
	mask := int64(len(e.log) - 1)
	for i := range cost {
		e.log[(s.t+s.n+i)&mask] = now
	}
	s.n += cost
	s.p = 0
	e.state = s
}

// concurrency is concurrency: units in flight, at most Quota.
func (p *Policy) concurrency(s *state, cost int64, d *Decision) {
	switch {
	case cost == 0:
	case cost > p.Quota:
		d.Allowed, d.RetryAfter = false, Never
	case s.n+cost <= p.Quota:
		s.n += cost
	default:
		d.Allowed = false // RetryAfter 0: units come back only when someone releases
	}
	d.Remaining = p.Quota - s.n
}

// freshAt returns the instant (ns) from which the entry's state is equivalent to that
// of a key never seen, if nothing more is charged: math.MinInt64 if it already is,
// math.MaxInt64 if it never becomes so by itself (concurrency units held).
func (p *Policy) freshAt(e *entry) int64 {
	s := e.state
	switch p.kind {
	case kindBucket, kindLeaky:
		if s.n == 0 {
			return math.MinInt64
		}
		return (s.t + p.ticksCeil(s.n)) * p.tick
	case kindFixed:
		if s.n == 0 {
			return math.MinInt64
		}
		return s.t + int64(p.Window)
	case kindSliding:
		switch {
		case s.n > 0:
			return s.t + 2*int64(p.Window)
		case s.p > 0:
			return s.t + int64(p.Window)
		}
		return math.MinInt64
	case kindLog:
		if s.n == 0 {
			return math.MinInt64
		}
		return e.log[(s.t+s.n-1)&int64(len(e.log)-1)] + int64(p.Window)
	default:
		if s.n == 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
}

// ticks converts an instant in ns to whole ticks, rounding down.
func (p *Policy) ticks(now int64) int64 {
	if p.tick == 1 {
		return now
	}
	return floorDiv(now, p.tick)
}

// ticksCeil and ticksFloor return how many ticks drain units (≥ 0), rounded up or
// down. A tick drains one unit whenever Quota divides the window in ticks, so the
// division is skipped then.
func (p *Policy) ticksCeil(units int64) int64 {
	if p.perTick == 1 {
		return units
	}
	return ceilDiv(units, p.perTick)
}

func (p *Policy) ticksFloor(units int64) int64 {
	if p.perTick == 1 {
		return units
	}
	return units / p.perTick
}

// untilTick returns the time from now until tick t starts, at least 0.
func (p *Policy) untilTick(t, now int64) time.Duration {
	return until(t*p.tick, now)
}

// until returns the time from now until instant t (ns), at least 0.
func until(t, now int64) time.Duration {
	if t <= now {
		return 0
	}
	return time.Duration(t - now)
}

// windowStart returns the start of the window of length w containing now.
func windowStart(now, w int64) int64 {
	return floorDiv(now, w) * w
}

// windowOf is windowStart, without dividing when now falls in the window starting at
// start, as it mostly does.
func windowOf(now, start, w int64) int64 {
	if now >= start && now-start < w {
		return start
	}
	return windowStart(now, w)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}
