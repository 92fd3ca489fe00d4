package limiter

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

var ctx = context.Background()

// keyN returns a distinct key for each n.
func keyN(n uint64) Key {
	var k Key
	binary.LittleEndian.PutUint64(k[:], n)
	k[15] = 0x5a
	return k
}

// TestAllOrNothing decides a "burst" and a "daily" policy together, as one request
// matching both would be: once daily denies, burst must not be charged.
func TestAllOrNothing(t *testing.T) {
	burst := mustPolicy(t, Policy{Name: "burst", Quota: 10, Window: time.Minute})
	daily := mustPolicy(t, Policy{Name: "daily", Algorithm: FixedWindow, Quota: 3, Window: 24 * time.Hour})
	apiKey, addr := keyN(1), keyN(2) // burst per API key, daily per address
	tests := []struct {
		at          time.Duration
		burst       int64 // cost asked of each
		daily       int64
		allowed     bool
		burstLeft   int64 // Remaining reported
		dailyLeft   int64
		burstPassed bool // burst's own verdict
	}{
		{at: 0, burst: 1, daily: 1, allowed: true, burstLeft: 9, dailyLeft: 2, burstPassed: true},
		{at: 0, burst: 1, daily: 1, allowed: true, burstLeft: 8, dailyLeft: 1, burstPassed: true},
		{at: 0, burst: 1, daily: 2, allowed: false, burstLeft: 8, dailyLeft: 1, burstPassed: true},
		{at: 0, burst: 1, daily: 2, allowed: false, burstLeft: 8, dailyLeft: 1, burstPassed: true},
		{at: 0, burst: 9, daily: 1, allowed: false, burstLeft: 8, dailyLeft: 1, burstPassed: false},
		{at: 0, burst: 8, daily: 1, allowed: true, burstLeft: 0, dailyLeft: 0, burstPassed: true},
		{at: time.Minute, burst: 1, daily: 1, allowed: false, burstLeft: 10, dailyLeft: 0, burstPassed: true},
		{at: 24 * time.Hour, burst: 10, daily: 3, allowed: true, burstLeft: 0, dailyLeft: 0, burstPassed: true},
	}
	s := mustLocal(t, Config{MaxEntries: 100, Shards: 16})
	var out []Decision
	for i, tt := range tests {
		reqs := []Request{
			{Policy: burst, Key: apiKey, Cost: tt.burst},
			{Policy: daily, Key: addr, Cost: tt.daily},
		}
		var allowed bool
		var err error
		out, allowed, err = s.Decide(ctx, t0.Add(tt.at), reqs, out[:0])
		if err != nil {
			t.Fatal(err)
		}
		if allowed != tt.allowed || out[0].Remaining != tt.burstLeft || out[1].Remaining != tt.dailyLeft ||
			out[0].Allowed != tt.burstPassed || out[1].Allowed != (tt.allowed || !tt.burstPassed) {
			t.Errorf("step %d: allowed %v, burst %+v, daily %+v", i, allowed, got(out[0]), got(out[1]))
		}
	}
	if st, want := burst.Stats(), (Stats{Allowed: 4, Vetoed: 3, Denied: 1}); st != want {
		t.Errorf("burst stats %+v, want %+v", st, want)
	}
	if st, want := daily.Stats(), (Stats{Allowed: 4, Denied: 3, Vetoed: 1}); st != want {
		t.Errorf("daily stats %+v, want %+v", st, want)
	}
}

// TestSameEntryTwice decides one entry twice in a batch: the second sees the first's
// charge, and if either is denied neither is charged.
func TestSameEntryTwice(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingLog, Concurrency} {
		t.Run(string(alg), func(t *testing.T) {
			p := mustPolicy(t, Policy{Name: "p", Algorithm: alg, Quota: 5, Window: time.Minute})
			s := mustLocal(t, Config{MaxEntries: 10})
			twice := func(a, b int64) (bool, []Decision) {
				out, ok, err := s.Decide(ctx, t0, []Request{{Policy: p, Key: Key{1}, Cost: a}, {Policy: p, Key: Key{1}, Cost: b}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return ok, out
			}
			if ok, out := twice(3, 3); ok || out[0].Remaining != 5 || out[1].Allowed {
				t.Fatalf("3+3 of 5: allowed %v, %+v %+v", ok, got(out[0]), got(out[1]))
			}
			if ok, out := twice(2, 3); !ok || out[0].Remaining != 3 || out[1].Remaining != 0 {
				t.Fatalf("2+3 of 5: allowed %v, %+v %+v", ok, got(out[0]), got(out[1]))
			}
		})
	}
}

// TestShadowBesideEnforced decides a shadow policy after the enforced one into the same
// out slice: the shadow's denial is reported and counted but blocks nothing.
func TestShadowBesideEnforced(t *testing.T) {
	enforced := mustPolicy(t, Policy{Name: "burst", Quota: 10, Window: time.Minute})
	shadow := mustPolicy(t, Policy{Name: "tighter", Quota: 1, Window: time.Minute})
	s := mustLocal(t, Config{})
	out := make([]Decision, 0, 2)
	for i := range 3 {
		var allowed bool
		out, allowed, _ = s.Decide(ctx, t0, []Request{{Policy: enforced, Key: Key{1}, Cost: 1}}, out[:0])
		out, _, _ = s.Decide(ctx, t0, []Request{{Policy: shadow, Key: Key{1}, Cost: 1}}, out)
		if !allowed || len(out) != 2 || out[1].Policy != shadow || out[1].Allowed != (i == 0) {
			t.Fatalf("request %d: allowed %v, decisions %+v", i, allowed, out)
		}
	}
	if st := shadow.Stats(); st.Allowed != 1 || st.Denied != 2 {
		t.Fatalf("shadow stats %+v", st)
	}
}

func TestConcurrency(t *testing.T) {
	p := mustPolicy(t, Policy{Name: "inflight", Algorithm: Concurrency, Quota: 3})
	s := mustLocal(t, Config{MaxEntries: 100})
	reqs := []Request{{Policy: p, Key: Key{7}, Cost: 1}}
	acquire := func() (*Lease, bool) {
		l, _, ok, err := Acquire(ctx, s, t0, reqs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l, ok
	}
	remaining := func() int64 {
		d, _ := s.Take(t0, Request{Policy: p, Key: Key{7}})
		return d.Remaining
	}

	t.Run("fourth waits for a release", func(t *testing.T) {
		var leases []*Lease
		for range 3 {
			l, ok := acquire()
			if !ok || l == nil {
				t.Fatal("acquire denied under quota")
			}
			leases = append(leases, l)
		}
		if _, ok := acquire(); ok {
			t.Fatal("fourth acquire allowed")
		}
		leases[0].Release()
		l, ok := acquire()
		if !ok {
			t.Fatal("acquire denied after a release")
		}
		leases[0] = l
		for _, l := range leases {
			l.Release()
		}
		if r := remaining(); r != 3 || s.Len() != 0 {
			t.Fatalf("after releasing all: remaining %d, %d entries", r, s.Len())
		}
	})
	t.Run("double release is harmless", func(t *testing.T) {
		a, _ := acquire()
		b, _ := acquire()
		a.Release()
		a.Release()
		if r := remaining(); r != 2 {
			t.Fatalf("remaining %d after a double release with one held, want 2", r)
		}
		b.Release()
		s.Release(ctx, reqs) // a stray release of nothing held
		if r := remaining(); r != 3 {
			t.Fatalf("remaining %d, want 3", r)
		}
		var none *Lease
		none.Release()
	})
	t.Run("1000 goroutines leave nothing held", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for range 1000 {
			wg.Go(func() {
				l, _, ok, err := Acquire(ctx, s, t0, reqs, nil)
				if err != nil || !ok {
					return
				}
				mu.Lock()
				admitted++
				mu.Unlock()
				runtime.Gosched()
				l.Release()
				l.Release()
			})
		}
		wg.Wait()
		if r := remaining(); r != 3 || s.Len() != 0 || admitted == 0 {
			t.Fatalf("remaining %d, %d entries, %d admitted", r, s.Len(), admitted)
		}
	})
}

// TestEviction fills a one-shard table of 4 and adds keys: fresh entries go first,
// then the one closest to fresh; an abuser stays.
func TestEviction(t *testing.T) {
	p := mustPolicy(t, Policy{Name: "p", Quota: 10, Window: 10 * time.Second}) // 1 token per second
	s := mustLocal(t, Config{MaxEntries: 4, Shards: 1})
	take := func(k Key, at time.Duration, cost int64) Decision {
		d, err := s.Take(t0.Add(at), Request{Policy: p, Key: k, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	abuser, light, medium, heavy := keyN(1), keyN(2), keyN(3), keyN(4)
	take(abuser, 0, 10)
	take(abuser, 0, 1) // denied: over its limit
	take(light, 0, 1)  // fresh again at t0+1s
	take(medium, 0, 3) // at t0+3s
	take(heavy, 0, 6)  // at t0+6s
	has := func(k Key) bool {
		_, ok := s.shards[0].index.find(entryHash(fold(&k), p.id), p.id, &k, s.shards[0].entries)
		return ok
	}
	steps := []struct {
		at      time.Duration
		cost    int64
		evicted Key
	}{
		{at: 2 * time.Second, cost: 9, evicted: light}, // light is fresh by now
		{at: 2 * time.Second, cost: 9, evicted: medium},
		{at: 2 * time.Second, cost: 5, evicted: heavy},
		{at: 2 * time.Second, cost: 1, evicted: keyN(102)}, // the cost 5 one is fresh at 7s
	}
	for i, st := range steps {
		take(keyN(uint64(100+i)), st.at, st.cost)
		if has(st.evicted) || s.Len() != 4 {
			t.Fatalf("step %d: %v not evicted, %d entries", i, st.evicted, s.Len())
		}
	}
	if d := take(abuser, 2*time.Second, 0); !has(abuser) || d.Remaining != 2 {
		t.Fatalf("the abuser was pardoned: %d remaining after 2s, want 2", d.Remaining)
	}
}

// TestHeldUnitsAreNeverEvicted fills a table with held concurrency units: a new key
// cannot be added, and the holders keep their units.
func TestHeldUnitsAreNeverEvicted(t *testing.T) {
	inflight := mustPolicy(t, Policy{Name: "inflight", Algorithm: Concurrency, Quota: 1})
	rate := mustPolicy(t, Policy{Name: "rate", Quota: 1, Window: time.Hour})
	s := mustLocal(t, Config{MaxEntries: 2, Shards: 1})
	for k := range uint64(2) {
		if _, ok, _ := s.Decide(ctx, t0, []Request{{Policy: inflight, Key: keyN(k), Cost: 1}}, nil); !ok {
			t.Fatal("acquire denied")
		}
	}
	both := []Request{{Policy: rate, Key: keyN(9), Cost: 1}, {Policy: inflight, Key: keyN(9), Cost: 1}}
	if _, ok, err := s.Decide(ctx, t0, both, nil); ok || !errors.Is(err, ErrFull) {
		t.Fatalf("allowed %v, err %v; want ErrFull", ok, err)
	}
	if d, _ := s.Take(t0, Request{Policy: rate, Key: keyN(9)}); d.Remaining != 1 || s.Len() != 2 {
		t.Fatalf("the failed batch left a charge or an entry: remaining %d, %d entries", d.Remaining, s.Len())
	}
	for k := range uint64(2) {
		if d, _ := s.Take(t0, Request{Policy: inflight, Key: keyN(k), Cost: 1}); d.Allowed {
			t.Fatalf("holder %d lost its unit", k)
		}
	}
}

// TestSweep checks that, once the table is half full, entries gone fresh are removed
// as new keys arrive.
func TestSweep(t *testing.T) {
	p := mustPolicy(t, Policy{Name: "p", Algorithm: FixedWindow, Quota: 5, Window: time.Second})
	s := mustLocal(t, Config{MaxEntries: 200, Shards: 1})
	for k := range uint64(150) {
		s.Take(t0, Request{Policy: p, Key: keyN(k), Cost: 1})
	}
	if n := s.Len(); n != 150 {
		t.Fatalf("%d entries, want 150: nothing is fresh yet", n)
	}
	for k := range uint64(30) {
		s.Take(t0.Add(time.Second), Request{Policy: p, Key: keyN(1000 + k), Cost: 1})
	}
	// Above half full, each addition sweeps 2 expired entries and adds 1.
	if n := s.Len(); n != 120 {
		t.Fatalf("%d entries after 30 additions, want 150−2×30+30", n)
	}
}

// TestPolicyIdentity checks that a policy remade with the same parameters (a reload)
// keeps its keys' state and one with new parameters starts afresh.
func TestPolicyIdentity(t *testing.T) {
	s := mustLocal(t, Config{})
	old := mustPolicy(t, Policy{Name: "p", Quota: 5, Window: time.Minute})
	s.Take(t0, Request{Policy: old, Key: Key{1}, Cost: 5})
	same := mustPolicy(t, Policy{Name: "p", Quota: 5, Window: time.Minute})
	if d, _ := s.Take(t0, Request{Policy: same, Key: Key{1}}); d.Remaining != 0 {
		t.Fatalf("remade policy sees remaining %d, want 0", d.Remaining)
	}
	changed := mustPolicy(t, Policy{Name: "p", Quota: 6, Window: time.Minute})
	if d, _ := s.Take(t0, Request{Policy: changed, Key: Key{1}}); d.Remaining != 6 {
		t.Fatalf("changed policy sees remaining %d, want 6", d.Remaining)
	}
}

// TestClockSteppingBack decides at instants earlier than ones already seen: no time
// passes for the key, so nothing is granted back.
func TestClockSteppingBack(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			p := mustPolicy(t, Policy{Name: "p", Algorithm: alg, Quota: 4, Window: 4 * time.Second})
			s := mustLocal(t, Config{})
			admitted := 0
			for _, at := range []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second, time.Second, 2 * time.Second, -time.Hour} {
				if d, _ := s.Take(t0.Add(at), Request{Policy: p, Key: Key{1}, Cost: 1}); d.Allowed {
					admitted++
				}
			}
			if admitted > 4 {
				t.Fatalf("%d admitted", admitted)
			}
		})
	}
}

func TestInvalid(t *testing.T) {
	p := mustPolicy(t, Policy{Name: "p", Quota: 1, Window: time.Second})
	s := mustLocal(t, Config{})
	for _, r := range []Request{{}, {Policy: &Policy{Name: "raw", Quota: 1, Window: time.Second}}, {Policy: p, Cost: -1}} {
		if _, ok, err := s.Decide(ctx, t0, []Request{r}, nil); ok || !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%+v: allowed %v, err %v", r, ok, err)
		}
	}
	policies := []struct {
		name   string
		policy Policy
		ok     bool
	}{
		{name: "defaults", policy: Policy{Name: "a", Quota: 1, Window: time.Second}, ok: true},
		{name: "no name", policy: Policy{Quota: 1, Window: time.Second}},
		{name: "unknown algorithm", policy: Policy{Name: "a", Algorithm: "token-bucket", Quota: 1, Window: time.Second}},
		{name: "zero quota", policy: Policy{Name: "a", Window: time.Second}},
		{name: "zero window", policy: Policy{Name: "a", Quota: 1}},
		{name: "concurrency ignores window", policy: Policy{Name: "a", Algorithm: Concurrency, Quota: 1}, ok: true},
		{name: "burst without gcra", policy: Policy{Name: "a", Quota: 2, Window: time.Second, Burst: 1}},
		{name: "burst above quota", policy: Policy{Name: "a", Algorithm: GCRA, Quota: 2, Window: time.Second, Burst: 3}},
		{name: "max delay without leaky", policy: Policy{Name: "a", Quota: 1, Window: time.Second, MaxDelay: time.Second}},
		{name: "leaky max delay", policy: Policy{Name: "a", Algorithm: LeakyBucket, Quota: 1, Window: time.Second, MaxDelay: time.Hour}, ok: true},
		{name: "log too long", policy: Policy{Name: "a", Algorithm: SlidingLog, Quota: MaxLogQuota + 1, Window: time.Second}},
		{name: "1 GiB per day", policy: Policy{Name: "a", Quota: 1 << 30, Window: 24 * time.Hour}, ok: true},
		{name: "1 TiB per year", policy: Policy{Name: "a", Quota: 1 << 40, Window: 366 * 24 * time.Hour}},
		{name: "prime quota per day", policy: Policy{Name: "a", Quota: 999983, Window: 24 * time.Hour}, ok: true},
		{name: "sub-second window", policy: Policy{Name: "a", Algorithm: SlidingWindow, Quota: 1e9, Window: 100*time.Millisecond + 1}},
	}
	for _, tt := range policies {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidPolicy)) {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

// TestMemoryBound sends 2,000,000 distinct keys through a table capped at 100,000
// entries: the cap holds throughout, and a key over its limit before the flood is
// still limited after it.
func TestMemoryBound(t *testing.T) {
	keys, capacity := 2_000_000, 100_000
	if testing.Short() || raceEnabled {
		keys, capacity = 200_000, 10_000
	}
	p := mustPolicy(t, Policy{Name: "p", Quota: 10, Window: time.Minute})
	s := mustLocal(t, Config{MaxEntries: capacity})
	abuser := Key{0xab, 0xcd}
	for range 11 {
		s.Take(t0, Request{Policy: p, Key: abuser, Cost: 1})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	reqs := make([]Request, 1)
	out := make([]Decision, 0, 1)
	for i := range uint64(keys) {
		reqs[0] = Request{Policy: p, Key: keyN(i), Cost: 1}
		out, _, _ = s.Decide(ctx, t0.Add(time.Duration(i)*time.Microsecond), reqs, out[:0])
		if i%50_000 == 0 {
			if n := s.Len(); n > capacity {
				t.Fatalf("%d entries after %d keys", n, i)
			}
		}
	}
	elapsed := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := s.Len()
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d keys in %v (%v per key); %d entries held; heap %d → %d MB (+%d MB, %d B per entry)",
		keys, elapsed.Round(time.Millisecond), elapsed/time.Duration(keys), n, before.HeapAlloc>>20, after.HeapAlloc>>20,
		growth>>20, growth/int64(n))
	if n > capacity {
		t.Fatalf("%d entries", n)
	}
	if d, _ := s.Take(t0.Add(2*time.Second), Request{Policy: p, Key: abuser, Cost: 1}); d.Allowed {
		t.Fatal("the abuser was pardoned by the flood")
	}
}

// TestConcurrentDecisions runs batches spanning several shards in both orders from
// many goroutines, with releases; run with -race. Quota must hold exactly.
func TestConcurrentDecisions(t *testing.T) {
	burst := mustPolicy(t, Policy{Name: "burst", Algorithm: FixedWindow, Quota: 1000, Window: time.Hour})
	log := mustPolicy(t, Policy{Name: "log", Algorithm: SlidingLog, Quota: 500, Window: time.Hour})
	inflight := mustPolicy(t, Policy{Name: "inflight", Algorithm: Concurrency, Quota: 4})
	s := mustLocal(t, Config{MaxEntries: 1000, Shards: 8})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := range 8 {
		wg.Go(func() {
			out := make([]Decision, 0, 3)
			for i := range 300 {
				a, b := keyN(1), keyN(2)
				if (g+i)%2 == 0 {
					a, b = b, a
				}
				reqs := []Request{{Policy: burst, Key: a, Cost: 1}, {Policy: log, Key: b, Cost: 1}, {Policy: inflight, Key: a, Cost: 1}}
				l, o, ok, err := Acquire(ctx, s, t0.Add(time.Duration(i)*time.Millisecond), reqs, out[:0])
				out = o
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					admitted++
					mu.Unlock()
					l.Release()
				}
				s.Take(t0, Request{Policy: burst, Key: keyN(uint64(100 + i))})
			}
		})
	}
	wg.Wait()
	if admitted == 0 || admitted > 2*500 {
		t.Fatalf("%d admitted", admitted)
	}
	var charged int64
	for _, k := range []Key{keyN(1), keyN(2)} {
		d, _ := s.Take(t0.Add(time.Second), Request{Policy: log, Key: k})
		charged += 500 - d.Remaining
	}
	if charged != int64(admitted) {
		t.Fatalf("%d admitted but %d charged to the log policy", admitted, charged)
	}
}

// A concurrency policy whose quota changes (a reload's new Policy of the same name)
// counts the units the old one holds, and takes their release.
func TestConcurrencyQuotaChangeKeepsHeld(t *testing.T) {
	s := mustLocal(t, Config{MaxEntries: 100})
	testQuotaChange(t, s)
}

// testQuotaChange holds 2 units under quota 2, then asks under quota 3 of the same name.
func testQuotaChange(t *testing.T, s Store) {
	t.Helper()
	old := mustPolicy(t, Policy{Name: "inflight", Algorithm: Concurrency, Quota: 2})
	raised := mustPolicy(t, Policy{Name: "inflight", Algorithm: Concurrency, Quota: 3})
	acquire := func(p *Policy) (*Lease, bool) {
		l, _, ok, err := Acquire(ctx, s, time.Now(), []Request{{Policy: p, Key: Key{9}, Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l, ok
	}
	var held []*Lease
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
	held[0].Release() // the old policy's lease gives its unit back to the shared count
	if l, ok = acquire(raised); !ok {
		t.Fatal("denied after the old policy's release")
	}
	held[0] = l
	for _, l := range held {
		l.Release()
	}
}
