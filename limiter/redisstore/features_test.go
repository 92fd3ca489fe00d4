package redisstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/limiter"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// go-redis logs every refused dial of the fault tests; the store's own warnings
	// are checked through its state instead.
	redis.SetLogger(quietLogger{})
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	code := m.Run()
	stopBenchRedis()
	os.Exit(code)
}

// TestSkew: two edges whose clocks are 2s ahead and 2s behind enforce one fixed
// window; without the offset correction they would count in two windows.
func TestSkew(t *testing.T) {
	srv := testkit.StartRedis(t)
	ahead := func() time.Time { return time.Now().Add(2 * time.Second) }
	behind := func() time.Time { return time.Now().Add(-2 * time.Second) }
	const w = 4 * time.Second // ahead and behind are a whole window apart
	run := func(sync time.Duration, name string) int {
		// A generous timeout: this test is about windows, and a slow round trip on a busy
		// machine must not end it.
		a := newStore(t, Config{URL: srv.URL(), ClockSync: sync, now: ahead, Timeout: time.Second})
		b := newStore(t, Config{URL: srv.URL(), ClockSync: sync, now: behind, Timeout: time.Second})
		if sync >= 0 {
			if d := a.Offset() + 2*time.Second; d.Abs() > 50*time.Millisecond {
				t.Fatalf("offset of the edge 2s ahead: %v", a.Offset())
			}
			if d := b.Offset() - 2*time.Second; d.Abs() > 50*time.Millisecond {
				t.Fatalf("offset of the edge 2s behind: %v", b.Offset())
			}
		}
		pol := mustPolicy(t, limiter.Policy{Name: name, Algorithm: limiter.FixedWindow, Quota: 10, Window: w})
		// Away from every instant at which a clock in play crosses a window edge: the
		// store's (now ≡ 0 mod w) and, uncorrected, the edges' (now ± 2s, ≡ w/2).
		if left := w/2 - time.Duration(time.Now().UnixNano()%int64(w/2)); left < 300*time.Millisecond {
			time.Sleep(left + 50*time.Millisecond)
		}
		// The edge behind goes first: uncorrected, it fills the earlier window and the
		// edge ahead then starts a new one.
		admitted := 0
		for i := range 30 {
			st, clock := b, behind
			if i >= 15 {
				st, clock = a, ahead
			}
			_, ok, err := st.Decide(context.Background(), clock(), []limiter.Request{{Policy: pol, Key: keyOf("raw-skew"), Cost: 1}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				admitted++
			}
		}
		return admitted
	}
	if got := run(0, "skew"); got != 10 {
		t.Fatalf("edges 4s apart admitted %d in one window, want 10", got)
	}
	if got := run(-1, "skew-uncorrected"); got != 20 {
		t.Fatalf("control: without correction the edges admitted %d, want 20 (two windows)", got)
	}
}

// TestGlobalConcurrency: quota 5 across 3 edges is never exceeded; held units are
// renewed; the units of an edge that dies return within the lease TTL.
func TestGlobalConcurrency(t *testing.T) {
	srv := testkit.StartRedis(t)
	const ttl = 900 * time.Millisecond
	cfg := func() Config { return Config{URL: srv.URL(), ConcurrencyTTL: ttl, Timeout: time.Second} }
	ss := edges(t, 3, cfg)
	pol := mustPolicy(t, limiter.Policy{Name: "conc", Algorithm: limiter.Concurrency, Quota: 5})
	key := keyOf("raw-conc")
	reqs := []limiter.Request{{Policy: pol, Key: key, Cost: 1}}

	var inflight, most, admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 30 {
		wg.Go(func() {
			st := ss[g%3]
			for range 30 {
				l, _, ok, err := limiter.Acquire(context.Background(), st, time.Now(), reqs, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					time.Sleep(500 * time.Microsecond)
					continue
				}
				admitted.Add(1)
				n := inflight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Duration(g%3) * time.Millisecond)
				inflight.Add(-1)
				if err := l.Release(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if most.Load() > 5 {
		t.Fatalf("%d in flight at once, quota 5", most.Load())
	}
	t.Logf("%d admitted, at most %d in flight (quota 5)", admitted.Load(), most.Load())
	for _, st := range ss {
		if st.Held() != 0 {
			t.Fatalf("a store still holds %d units", st.Held())
		}
	}

	// An edge holding all 5 keeps them past the TTL (renewed), then dies.
	dying := newStore(t, cfg())
	for range 5 {
		if _, ok, err := dying.Decide(context.Background(), time.Now(), reqs, nil); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
	}
	deny := func() bool {
		_, ok, err := ss[0].Decide(context.Background(), time.Now(), reqs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			ss[0].Release(context.Background(), reqs)
		}
		return !ok
	}
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if !deny() {
			t.Fatal("a unit came free while its holder was alive and renewing")
		}
	}
	dying.Close() // dies holding 5 units: no release
	died := time.Now()
	for deny() {
		if time.Since(died) > ttl+200*time.Millisecond {
			t.Fatalf("units of a dead edge not back after %v (TTL %v)", time.Since(died), ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("units of a dead edge back after %v (TTL %v)", time.Since(died).Round(time.Millisecond), ttl)
}

// TestNegativeCache: an over-limit key costs at most 0.05 Redis calls per decision,
// and is never admitted beyond its quota; a reloaded policy is not denied by the
// cache.
func TestNegativeCache(t *testing.T) {
	srv := testkit.StartRedis(t)
	cnt := &counter{}
	st := newStore(t, Config{Client: testClient(t, srv.Addr(), cnt), NegativeCache: true, Timeout: time.Second})
	pol := mustPolicy(t, limiter.Policy{Name: "neg", Quota: 5, Window: time.Minute})
	key := keyOf("raw-neg")
	reqs := []limiter.Request{{Policy: pol, Key: key, Cost: 1}}
	before := cnt.scripts.Load()
	var admitted, decisions atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			var out []limiter.Decision
			for range 1000 {
				var ok bool
				var err error
				out, ok, err = st.Decide(context.Background(), time.Now(), reqs, out[:0])
				if err != nil {
					t.Error(err)
					return
				}
				decisions.Add(1)
				if ok {
					admitted.Add(1)
				} else if out[0].RetryAfter <= 0 {
					t.Errorf("cached denial with RetryAfter %v", out[0].RetryAfter)
					return
				}
			}
		})
	}
	wg.Wait()
	calls := cnt.scripts.Load() - before
	ratio := float64(calls) / float64(decisions.Load())
	t.Logf("%d decisions, %d admitted, %d script calls: %.4f calls per decision", decisions.Load(), admitted.Load(), calls, ratio)
	if admitted.Load() != 5 {
		t.Fatalf("admitted %d, want 5", admitted.Load())
	}
	if ratio > 0.05 {
		t.Fatalf("%.4f Redis calls per decision, want ≤ 0.05", ratio)
	}
	// A reload that changes the policy must not reuse the cached verdict.
	reloaded := mustPolicy(t, limiter.Policy{Name: "neg", Quota: 50, Window: time.Minute})
	if _, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: reloaded, Key: key, Cost: 1}}, nil); err != nil || !ok {
		t.Fatalf("reloaded policy: allowed %v, %v", ok, err)
	}
}

// TestBatching counts round trips and proves that nothing is counted twice: what
// Redis counted equals what the store admitted.
func TestBatching(t *testing.T) {
	srv := testkit.StartRedis(t)
	for _, disabled := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", !disabled), func(t *testing.T) {
			cnt := &counter{}
			st := newStore(t, Config{Client: testClient(t, srv.Addr(), cnt), Batch: Batch{Disabled: disabled}, Timeout: time.Second})
			name := fmt.Sprint("batch-", disabled)
			pol := mustPolicy(t, limiter.Policy{Name: name, Algorithm: limiter.FixedWindow, Quota: 1 << 40, Window: 24 * time.Hour})
			awayFromBoundary(t, 24*time.Hour)
			key := keyOf("raw-batch")
			c0, p0, s0 := cnt.cmds.Load(), cnt.pipelines.Load(), cnt.scripts.Load()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			const callers, each = 64, 150
			for range callers {
				wg.Go(func() {
					for range each {
						if _, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: pol, Key: key, Cost: 1}}, nil); err != nil {
							t.Error(err)
						} else if ok {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			scripts, pipes, cmds := cnt.scripts.Load()-s0, cnt.pipelines.Load()-p0, cnt.cmds.Load()-c0
			n := float64(callers * each)
			t.Logf("%d decisions: %d script calls (%.3f per decision), %d pipelines, %d commands", callers*each, scripts, float64(scripts)/n, pipes, cmds)
			pi, _ := st.pol.get(pol, nil, time.Second)
			if n := readState(t, clientOf(t, srv), pi.redisKey(&key)).N; n != admitted.Load() {
				t.Fatalf("Redis counted %d, the store admitted %d", n, admitted.Load())
			}
			if !disabled && float64(scripts)/n > 0.5 {
				t.Fatalf("batching: %.3f script calls per decision", float64(scripts)/n)
			}
		})
	}
}

// TestNoScript: a flushed script cache (a restarted Redis, SCRIPT FLUSH) is healed,
// inside batched pipelines too, on one Redis and on a cluster.
func TestNoScript(t *testing.T) {
	check := func(t *testing.T, st *Store, flush func()) {
		pol := mustPolicy(t, limiter.Policy{Name: "noscript", Algorithm: limiter.FixedWindow, Quota: 1 << 30, Window: 24 * time.Hour})
		awayFromBoundary(t, 24*time.Hour)
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for g := range 32 {
			wg.Go(func() {
				for i := range 100 {
					if g == 0 && i%25 == 0 {
						flush()
					}
					k := keyOf(fmt.Sprint("raw-ns-", g%4))
					_, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{
						{Policy: pol, Key: k, Cost: 1}, {Policy: pol, Key: keyOf(fmt.Sprint("raw-ns-x", i%3)), Cost: 1}}, nil)
					if err != nil {
						t.Errorf("decision failed after SCRIPT FLUSH: %v", err)
						return
					}
					if ok {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if admitted.Load() != 3200 {
			t.Fatalf("admitted %d of 3200", admitted.Load())
		}
	}
	t.Run("single", func(t *testing.T) {
		srv := testkit.StartRedis(t)
		st := newStore(t, Config{URL: srv.URL(), Timeout: time.Second})
		c := clientOf(t, srv)
		check(t, st, func() { c.ScriptFlush(context.Background()) })
	})
	t.Run("cluster", func(t *testing.T) {
		cl := startCluster(t)
		st := newStore(t, Config{Cluster: cl.addrs(), Timeout: time.Second})
		c := clientOf(t, cl.nodes[1])
		check(t, st, func() { c.ScriptFlush(context.Background()) })
	})
}

// TestFleetSize: edges count each other through their heartbeats.
func TestFleetSize(t *testing.T) {
	srv := testkit.StartRedis(t)
	ss := edges(t, 3, func() Config { return Config{URL: srv.URL(), Heartbeat: 100 * time.Millisecond} })
	testkit.WaitFor(t, 2*time.Second, "fleet of 3", func() bool { return ss[0].FleetSize() == 3 })
	ss[2].Close()
	testkit.WaitFor(t, 2*time.Second, "fleet of 2 after one left", func() bool { return ss[0].FleetSize() == 2 })
	if !strings.HasPrefix(clientOf(t, srv).Get(context.Background(), edgeKeyPre+ss[0].EdgeID()).Val(), "host=") {
		t.Fatal("no heartbeat key")
	}
}

// TestBanBus: a ban published by one edge reaches two subscribers within 1s; an edge
// that starts later loads the bans in force.
func TestBanBus(t *testing.T) {
	srv := testkit.StartRedis(t)
	ss := edges(t, 2, func() Config { return Config{URL: srv.URL()} })
	type ban struct {
		p      netip.Prefix
		until  time.Time
		reason string
		at     time.Time
	}
	got := make([]chan ban, 3)
	sub := func(i int, st *Store) {
		got[i] = make(chan ban, 10)
		err := st.Bans().Subscribe(t.Context(), func(p netip.Prefix, until time.Time, reason string) {
			got[i] <- ban{p, until, reason, time.Now()}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sub(0, ss[0])
	sub(1, ss[1])
	p := netip.MustParsePrefix("192.0.2.0/24")
	until := time.Now().Add(time.Minute)
	sent := time.Now()
	if err := ss[0].Bans().Publish(context.Background(), p, until, "too many 429s"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		select {
		case b := <-got[i]:
			if b.p != p || b.reason != "too many 429s" || b.until.Sub(until).Abs() > 2*time.Millisecond {
				t.Fatalf("subscriber %d got %+v", i, b)
			}
			t.Logf("subscriber %d got the ban after %v", i, b.at.Sub(sent))
		case <-time.After(time.Second):
			t.Fatalf("subscriber %d: no ban within 1s", i)
		}
	}
	late := newStore(t, Config{URL: srv.URL()})
	sub(2, late)
	select {
	case b := <-got[2]:
		if b.p != p {
			t.Fatalf("late edge loaded %+v", b)
		}
	default:
		t.Fatal("a starting edge did not load the ban in force")
	}
	assertKeysExpire(t, clientOf(t, srv))
}

// TestLease: lease mode saves round trips, never admits beyond the quota while time
// stands still (a token bucket over an hour), and returns unused units.
func TestLease(t *testing.T) {
	srv := testkit.StartRedis(t)
	const quota, lease, hold = 300, 10, 300 * time.Millisecond
	cnt := &counter{}
	cfg := func() Config {
		return Config{Client: testClient(t, srv.Addr(), cnt), Timeout: time.Second, LeaseHold: hold,
			Lease: func(p *limiter.Policy) int64 {
				if p.Name == "leased" {
					return lease
				}
				return 0
			}}
	}
	ss := edges(t, 3, cfg)
	pol := mustPolicy(t, limiter.Policy{Name: "leased", Quota: quota, Window: time.Hour})
	key := keyOf("raw-lease")
	s0 := cnt.scripts.Load()
	var admitted, decisions atomic.Int64
	var wg sync.WaitGroup
	for g := range 60 { // demand = quota: round trips are counted while units last
		wg.Go(func() {
			for range 5 {
				_, ok, err := ss[g%3].Decide(context.Background(), time.Now(), []limiter.Request{{Policy: pol, Key: key, Cost: 1}}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				decisions.Add(1)
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	calls := cnt.scripts.Load() - s0
	t.Logf("%d decisions, %d admitted (quota %d, lease %d × 3 edges), %d script calls", decisions.Load(), admitted.Load(), quota, lease, calls)
	if a := admitted.Load(); a > quota || a < quota-3*lease {
		t.Fatalf("admitted %d, want between %d and %d", a, quota-3*lease, quota)
	}
	if float64(calls) > 0.3*float64(decisions.Load()) {
		t.Fatalf("lease mode made %d script calls for %d decisions", calls, decisions.Load())
	}
	// After LeaseHold the unused units are back in Redis.
	plain := newStore(t, Config{URL: srv.URL()})
	testkit.WaitFor(t, 3*hold+time.Second, "unused leased units returned", func() bool {
		out, _, err := plain.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: pol, Key: key}}, nil)
		return err == nil && math.Abs(float64(out[0].Remaining-(quota-admitted.Load()))) <= 1
	})
}

// A global concurrency policy whose quota changes (a reload's new Policy of the same
// name) counts the units the old one holds in Redis, and takes their release.
func TestGlobalConcurrencyQuotaChangeKeepsHeld(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newStore(t, Config{URL: srv.URL(), Timeout: time.Second})
	old := mustPolicy(t, limiter.Policy{Name: "conc", Algorithm: limiter.Concurrency, Quota: 2})
	raised := mustPolicy(t, limiter.Policy{Name: "conc", Algorithm: limiter.Concurrency, Quota: 3})
	key := keyOf("raw-quota-change")
	acquire := func(p *limiter.Policy) (*limiter.Lease, bool) {
		l, _, ok, err := limiter.Acquire(context.Background(), st, time.Now(), []limiter.Request{{Policy: p, Key: key, Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l, ok
	}
	var held []*limiter.Lease
	for range 2 {
		l, ok := acquire(old)
		if !ok {
			t.Fatal("acquire denied under quota 2")
		}
		held = append(held, l)
	}
	l, ok := acquire(raised)
	if !ok {
		t.Fatal("the third unit denied under quota 3")
	}
	held = append(held, l)
	if _, ok := acquire(raised); ok {
		t.Fatal("a fourth unit allowed under quota 3: the old policy's 2 were forgotten")
	}
	if err := held[0].Release(); err != nil {
		t.Fatal(err)
	}
	if l, ok = acquire(raised); !ok {
		t.Fatal("denied after the old policy's release")
	}
	held[0] = l
	for _, l := range held {
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if st.Held() != 0 {
		t.Fatalf("the store still holds %d units", st.Held())
	}
}
