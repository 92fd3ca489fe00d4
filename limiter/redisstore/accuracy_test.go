package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/limiter"
)

// edges returns n Stores on the same Redis: simulated edges.
func edges(t *testing.T, n int, cfg func() Config) []*Store {
	var ss []*Store
	for range n {
		ss = append(ss, newStore(t, cfg()))
	}
	return ss
}

// TestAccuracy: 3 edges on one Redis, 200 concurrent clients on one key: exactly
// Quota admitted for every algorithm that promises it.
func TestAccuracy(t *testing.T) {
	srv := testkit.StartRedis(t)
	ss := edges(t, 3, func() Config { return Config{URL: srv.URL(), Timeout: 2 * time.Second} })
	runAccuracy(t, ss)
	runSlidingWindowError(t, ss)
	assertKeysExpire(t, clientOf(t, srv))
}

// TestClusterAccuracy is TestAccuracy on a 3-master Redis Cluster, plus batches
// whose keys live on different slots.
func TestClusterAccuracy(t *testing.T) {
	c := startCluster(t)
	ss := edges(t, 3, func() Config { return Config{Cluster: c.addrs(), Timeout: 2 * time.Second} })
	// The store groups requests by slot itself: its CRC16 must be Redis's.
	cl := clientOf(t, c.nodes[0])
	for i := range 50 {
		k := keyOf(fmt.Sprint("raw-slot-", i))
		pi, _ := ss[0].pol.get(mustPolicy(t, limiter.Policy{Name: "slot", Quota: 1, Window: time.Second}), nil, time.Second)
		if want := cl.ClusterKeySlot(context.Background(), pi.redisKey(&k)).Val(); int64(slotOf(&k)) != want {
			t.Fatalf("slotOf = %d, CLUSTER KEYSLOT = %d", slotOf(&k), want)
		}
	}
	runAccuracy(t, ss)
	runCrossSlot(t, ss)
	assertKeysExpire(t, ss[0].rdb)
}

func runAccuracy(t *testing.T, ss []*Store) {
	const quota, clients, each = 100, 200, 3
	for _, p := range []limiter.Policy{
		{Name: "acc-tb", Quota: quota, Window: time.Hour},
		{Name: "acc-gcra", Algorithm: limiter.GCRA, Quota: quota, Window: time.Hour},
		{Name: "acc-fw", Algorithm: limiter.FixedWindow, Quota: quota, Window: time.Hour},
		{Name: "acc-sl", Algorithm: limiter.SlidingLog, Quota: quota, Window: time.Hour},
		{Name: "acc-sw", Algorithm: limiter.SlidingWindow, Quota: quota, Window: time.Hour},
	} {
		t.Run(p.Name, func(t *testing.T) {
			pol := mustPolicy(t, p)
			awayFromBoundary(t, time.Hour)
			var admitted, failed atomic.Int64
			key := keyOf("raw-" + p.Name)
			var wg sync.WaitGroup
			for g := range clients {
				wg.Go(func() {
					st := ss[g%len(ss)]
					for range each {
						_, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: pol, Key: key, Cost: 1}}, nil)
						switch {
						case err != nil:
							failed.Add(1)
						case ok:
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if failed.Load() != 0 {
				t.Fatalf("%d decisions failed", failed.Load())
			}
			// Sliding window with an empty previous window counts exactly too.
			if got := admitted.Load(); got != quota {
				t.Fatalf("%s: admitted %d of %d requests, want exactly %d", pol.Algorithm, got, clients*each, quota)
			}
			t.Logf("%s: admitted exactly %d of %d across %d edges", pol.Algorithm, quota, clients*each, len(ss))
		})
	}
}

// awayFromBoundary waits if a window of length w ends within the next 10s.
func awayFromBoundary(t *testing.T, w time.Duration) {
	now := time.Now()
	if end := now.Truncate(w).Add(w); end.Sub(now) < 10*time.Second {
		t.Logf("waiting %v for a window boundary to pass", end.Sub(now))
		time.Sleep(end.Sub(now) + 100*time.Millisecond)
	}
}

// runSlidingWindowError runs a steady overload across window boundaries and checks
// limiter's documented bound for sliding_window: at most Quota plus the previous
// window's excess over an even spread (below Quota) in any interval of one Window.
func runSlidingWindowError(t *testing.T, ss []*Store) {
	t.Run("sliding_window error", func(t *testing.T) {
		const quota = 50
		w := time.Second
		pol := mustPolicy(t, limiter.Policy{Name: "acc-swerr", Algorithm: limiter.SlidingWindow, Quota: quota, Window: w})
		key := keyOf("raw-swerr")
		var mu sync.Mutex
		var at []int64 // admission instants on the Redis clock
		var wg sync.WaitGroup
		stop := time.Now().Add(2500 * time.Millisecond)
		for g := range 60 {
			wg.Go(func() {
				st := ss[g%len(ss)]
				for time.Now().Before(stop) {
					now := time.Now()
					_, ok, err := st.Decide(context.Background(), now, []limiter.Request{{Policy: pol, Key: key, Cost: 1}}, nil)
					if err == nil && ok {
						mu.Lock()
						at = append(at, now.UnixNano()+int64(st.Offset()))
						mu.Unlock()
					}
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		slices.Sort(at)
		worst := 0
		for i := range at {
			j := i
			for j < len(at) && at[j] < at[i]+int64(w) {
				j++
			}
			worst = max(worst, j-i)
		}
		if worst > 2*quota-1 {
			t.Fatalf("%d admitted within one window, over the bound 2×quota−1 = %d", worst, 2*quota-1)
		}
		t.Logf("sliding_window: %d admitted in 2.5s (quota %d/s); worst window %d (error %+.0f%%, bound %d)",
			len(at), quota, worst, 100*float64(worst-quota)/quota, 2*quota-1)
	})
}

// runCrossSlot: a batch whose policies are keyed by two client keys on different
// slots stays all-or-nothing: a denial by "daily" (one slot) leaves "burst" (another
// slot) uncharged, read back from Redis.
func runCrossSlot(t *testing.T, ss []*Store) {
	t.Run("cross-slot all-or-nothing", func(t *testing.T) {
		burst := mustPolicy(t, limiter.Policy{Name: "xs-burst", Quota: 10, Window: time.Hour})
		daily := mustPolicy(t, limiter.Policy{Name: "xs-daily", Algorithm: limiter.FixedWindow, Quota: 3, Window: 24 * time.Hour})
		awayFromBoundary(t, 24*time.Hour)
		apiKey, ip := keyOf("raw-apikey"), keyOf("raw-ip")
		for slotOf(&apiKey) == slotOf(&ip) {
			ip[0]++
		}
		st := ss[0]
		var admitted int
		for i := range 6 {
			reqs := []limiter.Request{{Policy: burst, Key: apiKey, Cost: 1}, {Policy: daily, Key: ip, Cost: 1}}
			out, ok, err := st.Decide(context.Background(), time.Now(), reqs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				admitted++
			} else if out[1].Allowed || !out[0].Allowed {
				t.Fatalf("batch %d: want burst passing and daily denying, got %+v", i, out)
			} else if out[0].Remaining != 7 {
				t.Fatalf("batch %d: denied batch reports burst Remaining %d, want 7 (uncharged)", i, out[0].Remaining)
			}
		}
		if admitted != 3 {
			t.Fatalf("admitted %d, want 3", admitted)
		}
		// The refund of the admitted slot is sent right after the decision.
		deadline := time.Now().Add(2 * time.Second)
		for {
			out, _, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: burst, Key: apiKey}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if out[0].Remaining == 7 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("burst Remaining %d, want 7: a denied batch charged it", out[0].Remaining)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestAllOrNothing: a request that "daily" denies charges nothing to "burst", read back
// from Redis.
func TestAllOrNothing(t *testing.T) {
	srv := testkit.StartRedis(t)
	st := newStore(t, Config{URL: srv.URL(), Timeout: time.Second})
	burst := mustPolicy(t, limiter.Policy{Name: "burst", Quota: 10, Window: time.Hour})
	daily := mustPolicy(t, limiter.Policy{Name: "daily", Algorithm: limiter.FixedWindow, Quota: 3, Window: 24 * time.Hour})
	awayFromBoundary(t, 24*time.Hour)
	apiKey, ip := keyOf("raw-key-1"), keyOf("raw-ip-1")
	for i := range 5 {
		// burst keyed by API key, daily by IP: one script call on a single Redis.
		_, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{
			{Policy: burst, Key: apiKey, Cost: 1}, {Policy: daily, Key: ip, Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (i < 3) {
			t.Fatalf("batch %d: allowed %v", i, ok)
		}
	}
	c := clientOf(t, srv)
	bi, _ := st.pol.get(burst, nil, time.Second)
	bs := readState(t, c, bi.redisKey(&apiKey))
	par, _ := burst.Params()
	// Drained a little since: at most 3 units of backlog, more than 2.
	if bs.N > 3*par.PerUnit || bs.N <= 2*par.PerUnit {
		t.Fatalf("burst backlog in Redis %d, want 3 charges of %d (the denied ones charged nothing)", bs.N, par.PerUnit)
	}
	di, _ := st.pol.get(daily, nil, time.Second)
	if ds := readState(t, c, di.redisKey(&ip)); ds.N != 3 {
		t.Fatalf("daily count in Redis %d, want 3", ds.N)
	}
	t.Logf("read back: burst backlog %d units (3 × %d), daily count 3", bs.N, par.PerUnit)
}

// readState reads a packed state from Redis.
func readState(t *testing.T, c redis.UniversalClient, key string) limiter.State {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	st, ok := unpackState(v)
	if !ok {
		t.Fatalf("state %q not packed", v)
	}
	return st
}

// errorsIsUnavailable reports whether err is the store's unavailability.
func errorsIsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

var _ = redis.Nil
