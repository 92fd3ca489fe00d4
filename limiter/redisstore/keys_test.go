package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/limiter"
)

// assertKeysExpire fails if any key in Redis has no expiry, or contains a raw client
// key (every raw key the tests use starts with "raw-").
func assertKeysExpire(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	scan := func(c *redis.Client) {
		var cursor uint64
		n := 0
		for {
			keys, next, err := c.Scan(ctx, cursor, "*", 1000).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				n++
				ttl, err := c.PTTL(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				// go-redis returns PTTL's -1 (no expiry) and -2 (gone since the
				// SCAN) as those numbers of ns.
				if ttl == -1 {
					t.Errorf("key %q has no expiry", k)
				}
				if containsRaw(k) {
					t.Errorf("key %q contains a raw client key", k)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		t.Logf("%s: %d keys, all expiring", c.Options().Addr, n)
	}
	switch c := c.(type) {
	case *redis.Client:
		scan(c)
	case *redis.ClusterClient:
		c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			scan(c)
			return nil
		})
	}
}

func containsRaw(k string) bool {
	for i := 0; i+4 <= len(k); i++ {
		if k[i:i+4] == "raw-" {
			return true
		}
	}
	return false
}

// TestExpiryKeptUntilNeeded: a token_bucket or fixed_window write leaves a key's expiry
// alone while it outlasts what the stored state needs (moving an expiry costs Redis
// about as much as the rest of a decision), and sets it afresh once it would not. Each
// key is first given a much longer expiry than the scripts would set, so a kept expiry
// shows as that long one.
func TestExpiryKeptUntilNeeded(t *testing.T) {
	srv := testkit.StartRedis(t)
	c := clientOf(t, srv)
	st := newStore(t, Config{URL: srv.URL(), Batch: Batch{Disabled: true}, Timeout: time.Second})
	ctx := context.Background()
	const long = time.Minute
	pttl := func(key string) time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, key).Result()
		if err != nil || d < 0 {
			t.Fatalf("PTTL %s = %v, %v", key, d, err)
		}
		return d
	}
	decide := func(p *limiter.Policy, k limiter.Key, at time.Time) {
		t.Helper()
		if _, ok, err := st.Decide(ctx, at, []limiter.Request{{Policy: p, Key: k, Cost: 1}}, nil); !ok || err != nil {
			t.Fatalf("Decide at %v: %v, %v", at, ok, err)
		}
	}
	t0 := time.Now()

	// token_bucket 10 per 10s: the fullest backlog drains in 10s, so a fresh expiry is
	// 11s (the margin is 1s).
	tb := mustPolicy(t, limiter.Policy{Name: "tb", Quota: 10, Window: 10 * time.Second})
	k := keyOf("raw-expiry-tb")
	key := redisKeyOf(st, tb, k)
	decide(tb, k, t0)
	if d := pttl(key); d < 10*time.Second || d > 11500*time.Millisecond {
		t.Fatalf("token_bucket: first write set PTTL %v, want ~11s", d)
	}
	c.PExpire(ctx, key, long)
	decide(tb, k, t0.Add(time.Second)) // backlog ~1 unit: drains long before the expiry
	if d := pttl(key); d < long-5*time.Second {
		t.Errorf("token_bucket: PTTL %v after a write the expiry covered, want the kept ~%v", d, long)
	}
	// 9.5s on, the expiry set at t0 (t0+11s) no longer outlasts the backlog by the
	// margin: set afresh.
	decide(tb, k, t0.Add(9500*time.Millisecond))
	if d := pttl(key); d > 11500*time.Millisecond {
		t.Errorf("token_bucket: PTTL %v after a write the expiry did not cover, want a fresh ~11s", d)
	}

	// fixed_window 5 per 10s: the first write of a window sets the expiry to its end
	// plus the margin; later writes in that window keep it.
	fw := mustPolicy(t, limiter.Policy{Name: "fw", Algorithm: limiter.FixedWindow, Quota: 5, Window: 10 * time.Second})
	k = keyOf("raw-expiry-fw")
	key = redisKeyOf(st, fw, k)
	decide(fw, k, t0)
	if d := pttl(key); d > 11500*time.Millisecond {
		t.Fatalf("fixed_window: first write set PTTL %v, want at most 11s", d)
	}
	c.PExpire(ctx, key, long)
	decide(fw, k, t0.Add(time.Millisecond))
	if d := pttl(key); d < long-5*time.Second {
		t.Errorf("fixed_window: PTTL %v after a write in the same window, want the kept ~%v", d, long)
	}
	decide(fw, k, t0.Add(10*time.Second)) // the next window
	if d := pttl(key); d > 21*time.Second {
		t.Errorf("fixed_window: PTTL %v after the first write of a new window, want a fresh one", d)
	}
	assertKeysExpire(t, c)
}

// redisKeyOf is the key under which st keeps k's state for p.
func redisKeyOf(st *Store, p *limiter.Policy, k limiter.Key) string {
	pi, _ := st.pol.get(p, st.cfg.Lease, st.cfg.ConcurrencyTTL)
	return pi.redisKey(&k)
}
