package limiter

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestTokenBucketMatchesXTimeRate checks token_bucket decision for decision against
// golang.org/x/time/rate.Limiter.AllowN with rate Quota/Window and burst Quota, on
// random non-decreasing instants and costs (including 0 and more than the burst).
//
// x/time/rate counts tokens in float64 and truncates its wait to whole nanoseconds;
// token_bucket counts exactly in integers and admits a request less than 1 ns early to
// match. They can differ only on a tie: a request short by exactly 1 ns of refill,
// which exact arithmetic denies (a 1 ns wait) and x/time/rate's floats, off by ~1e-7 ns,
// admit or deny at random. Ties arise when refill takes a fractional number of
// nanoseconds and instants fall on its truncated multiples, as the half-interval gaps
// here do. The test finds them from the integer state beforehand, moves them 1 ns later
// (where both must admit), and counts them; every other request must agree.
func TestTokenBucketMatchesXTimeRate(t *testing.T) {
	tests := []struct {
		name   string
		quota  int64
		window time.Duration
	}{
		{name: "100 per minute", quota: 100, window: time.Minute},
		{name: "3 per second", quota: 3, window: time.Second},
		{name: "7 per second", quota: 7, window: time.Second},
		{name: "1000 per second", quota: 1000, window: time.Second},
		{name: "12 per 7s", quota: 12, window: 7 * time.Second},
		{name: "1 per hour", quota: 1, window: time.Hour},
		{name: "5000 per day", quota: 5000, window: 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, Policy{Name: "tb", Quota: tt.quota, Window: tt.window})
			interval := float64(tt.window) / float64(tt.quota)
			for seed := range uint64(5) {
				rng := rand.New(rand.NewPCG(seed, 42))
				lim := rate.NewLimiter(rate.Limit(float64(tt.quota)/tt.window.Seconds()), int(tt.quota))
				var s state
				now := t0.UnixNano()
				var allowed, denied, ties int
				for i := range 5000 {
					now += randomGap(rng, interval)
					cost := randomCost(rng, tt.quota)
					if p.isTie(s, now, cost) {
						now++
						ties++
					}
					want := lim.AllowN(time.Unix(0, now), int(cost))
					next, d := stepped(p, s, nil, now, cost)
					if d.Allowed != want {
						t.Fatalf("seed %d event %d (t0+%v, cost %d): token_bucket %v, x/time/rate %v",
							seed, i, time.Duration(now-t0.UnixNano()), cost, d.Allowed, want)
					}
					if d.Allowed {
						s = next
						allowed++
					} else {
						denied++
					}
				}
				if allowed < 500 || denied < 500 {
					t.Fatalf("seed %d: trace too one-sided: %d allowed, %d denied", seed, allowed, denied)
				}
				if ties > 0 {
					t.Logf("seed %d: %d of 5000 instants were exact 1 ns ties, moved 1 ns", seed, ties)
				}
			}
		})
	}
}

// randomGap returns a gap in ns between events arriving somewhat faster than one
// per interval: often 0, often a multiple of half an interval (exact refill
// boundaries), otherwise random, now and then long idle.
func randomGap(rng *rand.Rand, interval float64) int64 {
	switch r := rng.IntN(20); {
	case r < 3:
		return 0
	case r < 7:
		return int64(float64(rng.IntN(3)) * interval / 2)
	case r == 7:
		return int64(interval * float64(1+rng.IntN(200)))
	default:
		return int64(rng.ExpFloat64() * interval * 0.6)
	}
}

// randomCost returns mostly 1, sometimes 0, sometimes larger, rarely above quota.
func randomCost(rng *rand.Rand, quota int64) int64 {
	switch r := rng.IntN(20); {
	case r < 2:
		return 0
	case r < 5:
		return 1 + rng.Int64N(quota)
	case r == 5:
		return quota + 1 + rng.Int64N(3)
	default:
		return 1
	}
}

// trace runs a random trace through a policy's step function and returns the admitted
// units as (instant, cost) pairs, in order, with the denied requests.
type event struct{ at, cost int64 }

func runTrace(t *testing.T, p *Policy, events []event) (admitted, denied []event) {
	t.Helper()
	e := &entry{policy: p}
	for _, ev := range events {
		next, d := stepped(p, e.state, e.log, ev.at, ev.cost)
		if !d.Allowed {
			denied = append(denied, ev)
			continue
		}
		if p.kind == kindLog {
			p.logAppend(e, ev.at, ev.cost)
		} else {
			e.state = next
		}
		admitted = append(admitted, ev)
	}
	return admitted, denied
}

// inWindow returns the units admitted in (at−w, at] among admitted[:upto+1].
func inWindow(admitted []event, upto int, at, w int64) int64 {
	var n int64
	for i := upto; i >= 0 && admitted[i].at > at-w; i-- {
		n += admitted[i].cost
	}
	return n
}

// TestSlidingLogIsExact checks, by brute force on random traces, that sliding_log never
// admits more than Quota units in any interval of length Window, and that it denies only
// requests that would have exceeded it.
func TestSlidingLogIsExact(t *testing.T) {
	const quota, window = 20, int64(10 * time.Second)
	p := mustPolicy(t, Policy{Name: "log", Algorithm: SlidingLog, Quota: quota, Window: time.Duration(window)})
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var events []event
		now := t0.UnixNano()
		for range 4000 {
			now += randomGap(rng, float64(window)/quota)
			events = append(events, event{now, 1 + rng.Int64N(3)})
		}
		admitted, denied := runTrace(t, p, events)
		for i, a := range admitted {
			if n := inWindow(admitted, i, a.at, window); n > quota {
				t.Fatalf("seed %d: %d units in the window ending t0+%v", seed, n, time.Duration(a.at-t0.UnixNano()))
			}
		}
		for _, d := range denied {
			upto := len(admitted) - 1
			for upto >= 0 && admitted[upto].at > d.at {
				upto--
			}
			if n := inWindow(admitted, upto, d.at, window); n+d.cost <= quota {
				t.Fatalf("seed %d: denied %d units at t0+%v with only %d in the window",
					seed, d.cost, time.Duration(d.at-t0.UnixNano()), n)
			}
		}
		t.Logf("seed %d: %d admitted, %d denied", seed, len(admitted), len(denied))
	}
}

// TestSlidingWindowBound measures sliding_window's over-admission on random traces.
//
// The bound, derived from the admission rule: take an interval (a−W, a] ending at an
// admission a, in aligned window [S, S+W) with S ≤ a. The rule admitted a because
//
//	cur + prev×(S+W−a)/W ≤ Quota
//
// where cur counts units admitted in [S, a] and prev those in [S−W, S). The interval
// holds cur plus the units of [S−W, S) later than a−W, call them over. So it holds at most
//
//	Quota + (over − prev×(S+W−a)/W)
//
// units: Quota plus the previous window's excess over an even spread, measured on its
// last (S+W−a)/W part. The excess is below prev ≤ Quota (it approaches Quota only when
// the whole previous window's traffic came at its very end), so no interval of length W
// ever holds 2×Quota; for random arrivals it is of the order of √Quota. The test checks
// the inequality at every admission (exactly, in integers) and reports the largest
// over-admission seen; TestSlidingWindowWorstCase shows the 2×Quota−1 worst case.
func TestSlidingWindowBound(t *testing.T) {
	tests := []struct {
		name  string
		quota int64
		gap   func(rng *rand.Rand, interval float64) int64
	}{
		{name: "poisson, 1.5× the rate", quota: 100, gap: func(rng *rand.Rand, iv float64) int64 {
			return int64(rng.ExpFloat64() * iv / 1.5)
		}},
		{name: "mixed gaps", quota: 100, gap: randomGap},
		{name: "bursts", quota: 50, gap: func(rng *rand.Rand, iv float64) int64 {
			if rng.IntN(40) == 0 {
				return int64(iv * 40 * rng.Float64())
			}
			return 0
		}},
	}
	const window = int64(10 * time.Second)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, Policy{Name: "sw", Algorithm: SlidingWindow, Quota: tt.quota, Window: time.Duration(window)})
			var worst int64
			for seed := range uint64(5) {
				rng := rand.New(rand.NewPCG(seed, 9))
				var events []event
				now := t0.UnixNano()
				for range 20000 {
					now += tt.gap(rng, float64(window)/float64(tt.quota))
					events = append(events, event{now, 1})
				}
				admitted, _ := runTrace(t, p, events)
				for i, a := range admitted {
					n := inWindow(admitted, i, a.at, window)
					worst = max(worst, n-tt.quota)
					start := windowStart(a.at, window)
					var prev, over int64
					for j := i; j >= 0 && admitted[j].at >= start-window; j-- {
						if admitted[j].at < start {
							prev += admitted[j].cost
							if admitted[j].at > a.at-window {
								over += admitted[j].cost
							}
						}
					}
					rest := start + window - a.at
					if (n-tt.quota)*window > over*window-prev*rest {
						t.Fatalf("seed %d: %d units in the window ending t0+%v, over the bound (prev %d, over %d)",
							seed, n, time.Duration(a.at-t0.UnixNano()), prev, over)
					}
					if n > 2*tt.quota-1 {
						t.Fatalf("seed %d: %d units in one window", seed, n)
					}
				}
			}
			t.Logf("quota %d: worst over-admission in any window %d (%.1f%% of quota, √quota = %.0f)",
				tt.quota, worst, 100*float64(worst)/float64(tt.quota), math.Sqrt(float64(tt.quota)))
		})
	}
}

// TestSlidingWindowWorstCase shows the bound is tight: Quota units at the very end of
// one window, then one unit as soon as each is admitted, give 2×Quota−1 units within
// one Window.
func TestSlidingWindowWorstCase(t *testing.T) {
	const quota, window = 10, int64(10 * time.Second)
	p := mustPolicy(t, Policy{Name: "sw", Algorithm: SlidingWindow, Quota: quota, Window: time.Duration(window)})
	var events []event
	burst := t0.UnixNano() + window - 1
	events = append(events, event{burst, quota})
	for at := burst + 1; at < burst+window; at += int64(time.Millisecond) {
		events = append(events, event{at, 1})
	}
	admitted, _ := runTrace(t, p, events)
	worst := int64(0)
	for i, a := range admitted {
		worst = max(worst, inWindow(admitted, i, a.at, window))
	}
	if worst != 2*quota-1 {
		t.Fatalf("worst window holds %d units, want %d", worst, 2*quota-1)
	}
}

// TestFixedWindowBoundary shows fixed_window's weakness: Quota just before a boundary
// and Quota just after pass within 2 ns.
func TestFixedWindowBoundary(t *testing.T) {
	p := mustPolicy(t, Policy{Name: "fw", Algorithm: FixedWindow, Quota: 5, Window: time.Minute})
	boundary := t0.Add(time.Minute).UnixNano()
	admitted, _ := runTrace(t, p, []event{
		{boundary - 1, 5}, {boundary - 1, 1}, {boundary, 5}, {boundary, 1},
	})
	var n int64
	for _, a := range admitted {
		n += a.cost
	}
	if n != 10 {
		t.Fatalf("admitted %d units across the boundary, want 2×5", n)
	}
}

// TestLeakyBucketSpacing checks that leaky_bucket spaces admissions exactly
// Window/Quota apart, and that with MaxDelay the delays grow by exactly that interval.
func TestLeakyBucketSpacing(t *testing.T) {
	const interval = 200 * time.Millisecond
	t.Run("no delay: a flood is admitted every interval", func(t *testing.T) {
		p := mustPolicy(t, Policy{Name: "lb", Algorithm: LeakyBucket, Quota: 5, Window: time.Second})
		var events []event
		for at := range int64(3 * time.Second / time.Millisecond) {
			events = append(events, event{t0.UnixNano() + at*int64(time.Millisecond), 1})
		}
		admitted, _ := runTrace(t, p, events)
		if len(admitted) != 15 {
			t.Fatalf("admitted %d in 3s, want 15", len(admitted))
		}
		for i := 1; i < len(admitted); i++ {
			if gap := time.Duration(admitted[i].at - admitted[i-1].at); gap != interval {
				t.Fatalf("admissions %d and %d are %v apart, want %v", i-1, i, gap, interval)
			}
		}
	})
	t.Run("max delay: a burst is queued one interval apart", func(t *testing.T) {
		p := mustPolicy(t, Policy{Name: "lb", Algorithm: LeakyBucket, Quota: 5, Window: time.Second, MaxDelay: time.Second})
		s := mustLocal(t, Config{MaxEntries: 10})
		for i := range 7 {
			d, _ := s.Take(t0, Request{Policy: p, Key: Key{1}, Cost: 1})
			if i < 6 {
				if want := time.Duration(i) * interval; !d.Allowed || d.Delay != want {
					t.Fatalf("request %d: allowed %v, delay %v; want delay %v", i, d.Allowed, d.Delay, want)
				}
			} else if d.Allowed || d.RetryAfter != interval {
				t.Fatalf("request %d: allowed %v, retry after %v; want denied, %v", i, d.Allowed, d.RetryAfter, interval)
			}
		}
	})
	t.Run("max delay: slots of a flood start every interval", func(t *testing.T) {
		p := mustPolicy(t, Policy{Name: "lb", Algorithm: LeakyBucket, Quota: 5, Window: time.Second, MaxDelay: 700 * time.Millisecond})
		s := mustLocal(t, Config{MaxEntries: 10})
		var starts []time.Time
		for at := time.Duration(0); at < 3*time.Second; at += 7 * time.Millisecond {
			if d, _ := s.Take(t0.Add(at), Request{Policy: p, Key: Key{1}, Cost: 1}); d.Allowed {
				starts = append(starts, t0.Add(at+d.Delay))
			}
		}
		for i := 1; i < len(starts); i++ {
			if gap := starts[i].Sub(starts[i-1]); gap != interval {
				t.Fatalf("slots %d and %d start %v apart, want %v", i-1, i, gap, interval)
			}
		}
		if len(starts) < 15 {
			t.Fatalf("only %d admitted", len(starts))
		}
	})
}

// TestTimesAreExact checks Remaining, RetryAfter and ResetAfter on random traces for
// every algorithm: a request is allowed exactly when its cost is at most what a read
// reports Remaining (except leaky_bucket, which admits a request of any cost whose first
// slot is within MaxDelay); a request retried RetryAfter later is allowed and 1 ns
// sooner is not;
// Remaining rises exactly ResetAfter later, and never by itself when ResetAfter is 0;
// a denial's RetryAfter is never sooner than its ResetAfter.
func TestTimesAreExact(t *testing.T) {
	policies := []Policy{
		{Algorithm: TokenBucket, Quota: 10, Window: 10 * time.Second},
		{Algorithm: TokenBucket, Quota: 7, Window: time.Second},
		{Algorithm: GCRA, Quota: 9, Window: 3 * time.Second, Burst: 4},
		{Algorithm: FixedWindow, Quota: 10, Window: 10 * time.Second},
		{Algorithm: SlidingWindow, Quota: 10, Window: 10 * time.Second},
		{Algorithm: SlidingWindow, Quota: 7, Window: 3 * time.Second},
		{Algorithm: SlidingLog, Quota: 10, Window: 10 * time.Second},
		{Algorithm: LeakyBucket, Quota: 10, Window: 10 * time.Second},
		{Algorithm: LeakyBucket, Quota: 10, Window: 10 * time.Second, MaxDelay: 3500 * time.Millisecond},
		{Algorithm: LeakyBucket, Quota: 3, Window: time.Second, MaxDelay: time.Second},
	}
	for _, pol := range policies {
		pol.Name = "p"
		p := mustPolicy(t, pol)
		t.Run(string(pol.Algorithm), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			e := &entry{policy: p}
			now := t0.UnixNano()
			read := func(at int64) Decision {
				_, d := stepped(p, e.state, e.log, at, 0)
				return d
			}
			for i := range 3000 {
				now += randomGap(rng, float64(pol.Window)/float64(pol.Quota))
				cost := randomCost(rng, pol.Quota)
				before := read(now).Remaining
				next, d := stepped(p, e.state, e.log, now, cost)
				if p.kind != kindLeaky && cost <= pol.Quota && d.Allowed != (cost <= before) {
					t.Fatalf("event %d: cost %d allowed %v with %d remaining", i, cost, d.Allowed, before)
				}
				if !d.Allowed && d.RetryAfter != Never {
					ra := int64(d.RetryAfter)
					if _, d2 := stepped(p, e.state, e.log, now+ra, cost); !d2.Allowed {
						t.Fatalf("event %d: cost %d denied again after RetryAfter %v", i, cost, d.RetryAfter)
					}
					if _, d2 := stepped(p, e.state, e.log, now+ra-1, cost); ra > 0 && d2.Allowed {
						t.Fatalf("event %d: cost %d allowed 1ns before RetryAfter %v", i, cost, d.RetryAfter)
					}
					if d.RetryAfter < d.ResetAfter {
						t.Fatalf("event %d: RetryAfter %v before ResetAfter %v", i, d.RetryAfter, d.ResetAfter)
					}
				}
				if d.Allowed {
					if p.kind == kindLog {
						p.logAppend(e, now, cost)
					} else {
						e.state = next
					}
				}
				if r := read(now).Remaining; r != d.Remaining {
					t.Fatalf("event %d: Remaining %d, read right after says %d", i, d.Remaining, r)
				}
				ra := int64(d.ResetAfter)
				if ra == 0 {
					if r := read(now + 5*int64(pol.Window)).Remaining; r != d.Remaining {
						t.Fatalf("event %d: ResetAfter 0 but Remaining rose from %d to %d", i, d.Remaining, r)
					}
					continue
				}
				if r := read(now + ra).Remaining; r <= d.Remaining {
					t.Fatalf("event %d: Remaining %d did not rise after ResetAfter %v", i, d.Remaining, d.ResetAfter)
				}
				if r := read(now + ra - 1).Remaining; r != d.Remaining {
					t.Fatalf("event %d: Remaining rose from %d to %d before ResetAfter %v", i, d.Remaining, r, d.ResetAfter)
				}
			}
		})
	}
}

// stepped is step as a function of values.
func stepped(p *Policy, s state, ring []int64, now, cost int64) (state, Decision) {
	var d Decision
	p.step(&s, ring, now, cost, &d)
	return s, d
}

// isTie reports whether a request at now would be short by exactly one tick of refill.
func (p *Policy) isTie(s state, now, cost int64) bool {
	p.drain(&s, p.ticks(now))
	return cost > 0 && cost <= p.burst && s.n+cost*p.perUnit-p.capUnits == p.perTick
}
