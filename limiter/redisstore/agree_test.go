package redisstore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/limiter"
)

func mustPolicy(tb testing.TB, p limiter.Policy) *limiter.Policy {
	tb.Helper()
	pp, err := limiter.NewPolicy(p)
	if err != nil {
		tb.Fatal(err)
	}
	return pp
}

// keyOf hashes a raw client key as the edge would (the edge uses a keyed hash).
func keyOf(raw string) limiter.Key {
	var k limiter.Key
	h := sha256.Sum256([]byte("test-secret\x00" + raw))
	copy(k[:], h[:])
	return k
}

// TestAgreesWithLocal checks every script decision for decision, field for field,
// against limiter.Local on random event sequences: the same policies, the same
// instants (steps back included), costs from 0 to beyond the quota, batches over
// several policies and keys with the same entry twice, and releases.
func TestAgreesWithLocal(t *testing.T) {
	srv := testkit.StartRedis(t)
	cases := []struct {
		name     string
		policies []limiter.Policy
	}{
		{"token_bucket", []limiter.Policy{{Name: "tb", Quota: 7, Window: time.Second}}},
		{"token_bucket 12 per 7s", []limiter.Policy{{Name: "tb7", Quota: 12, Window: 7 * time.Second}}},
		{"gcra", []limiter.Policy{{Name: "gcra", Algorithm: limiter.GCRA, Quota: 10, Window: time.Second, Burst: 4}}},
		{"fixed_window", []limiter.Policy{{Name: "fw", Algorithm: limiter.FixedWindow, Quota: 5, Window: 2 * time.Second}}},
		{"sliding_window", []limiter.Policy{{Name: "sw", Algorithm: limiter.SlidingWindow, Quota: 10, Window: 3 * time.Second}}},
		{"sliding_window 7 per 1.3s", []limiter.Policy{{Name: "sw13", Algorithm: limiter.SlidingWindow, Quota: 7, Window: 1300 * time.Millisecond}}},
		{"sliding_log", []limiter.Policy{{Name: "sl", Algorithm: limiter.SlidingLog, Quota: 6, Window: 2 * time.Second}}},
		{"leaky_bucket", []limiter.Policy{{Name: "lb", Algorithm: limiter.LeakyBucket, Quota: 5, Window: time.Second}}},
		{"leaky_bucket with delay", []limiter.Policy{{Name: "lbd", Algorithm: limiter.LeakyBucket, Quota: 5, Window: time.Second, MaxDelay: 700 * time.Millisecond}}},
		{"concurrency", []limiter.Policy{{Name: "cc", Algorithm: limiter.Concurrency, Quota: 3}}},
		{"mixed", []limiter.Policy{
			{Name: "burst", Quota: 6, Window: time.Second},
			{Name: "daily", Algorithm: limiter.FixedWindow, Quota: 20, Window: 5 * time.Second},
			{Name: "log", Algorithm: limiter.SlidingLog, Quota: 9, Window: 3 * time.Second},
			{Name: "slide", Algorithm: limiter.SlidingWindow, Quota: 8, Window: 2 * time.Second},
			{Name: "conc", Algorithm: limiter.Concurrency, Quota: 2},
			{Name: "shape", Algorithm: limiter.LeakyBucket, Quota: 4, Window: time.Second, MaxDelay: 300 * time.Millisecond},
		}},
	}
	for _, batching := range []bool{false, true} {
		for ci, tc := range cases {
			t.Run(fmt.Sprintf("%s/batching=%v", tc.name, batching), func(t *testing.T) {
				var ps []*limiter.Policy
				for _, p := range tc.policies {
					ps = append(ps, mustPolicy(t, p))
				}
				st := newStore(t, Config{URL: srv.URL(), ClockSync: -1, Batch: Batch{Disabled: !batching},
					ConcurrencyTTL: time.Hour, Timeout: time.Second})
				loc, _ := limiter.NewLocal(limiter.Config{})
				agree(t, st, loc, ps, uint64(ci)*7+map[bool]uint64{false: 1, true: 2}[batching], 1200)
			})
		}
	}
	assertKeysExpire(t, clientOf(t, srv))
}

// agree runs n random events through both stores and fails at the first difference.
func agree(t *testing.T, st limiter.Store, loc *limiter.Local, ps []*limiter.Policy, seed uint64, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	keys := []limiter.Key{keyOf(fmt.Sprint("a", seed)), keyOf(fmt.Sprint("b", seed)), keyOf(fmt.Sprint("c", seed))}
	now := time.Now().UnixNano()
	var held [][]limiter.Request
	ctx := context.Background()
	var allowed, denied int
	for i := range n {
		switch r := rng.IntN(22); {
		case r < 8:
		case r >= 20:
			// exact fractions of a second: instants land exactly a window after
			// earlier ones, where off-by-one boundaries show
			now += int64(time.Second) / int64(1+rng.IntN(4))
		case r < 14:
			now += rng.Int64N(int64(300 * time.Millisecond))
		case r < 17:
			now += rng.Int64N(int64(40*time.Millisecond)) + 1
		case r < 19:
			now += rng.Int64N(int64(2 * time.Second))
		default:
			now -= rng.Int64N(int64(200 * time.Millisecond)) // a clock stepping back
		}
		if len(held) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(held))
			rel := held[j]
			held = append(held[:j], held[j+1:]...)
			if err := st.Release(ctx, rel); err != nil {
				t.Fatalf("event %d: Release: %v", i, err)
			}
			loc.Release(ctx, rel)
			continue
		}
		var reqs []limiter.Request
		k := keys[rng.IntN(len(keys))]
		for _, p := range ps {
			if len(ps) > 1 && rng.IntN(3) == 0 {
				continue
			}
			cost := int64(1)
			switch rng.IntN(10) {
			case 0:
				cost = 0
			case 1:
				cost = rng.Int64N(p.Quota + 2)
			}
			kk := k
			if rng.IntN(8) == 0 {
				kk = keys[rng.IntN(len(keys))] // another client in the same batch
			}
			reqs = append(reqs, limiter.Request{Policy: p, Key: kk, Cost: cost})
			if rng.IntN(10) == 0 {
				reqs = append(reqs, limiter.Request{Policy: p, Key: kk, Cost: rng.Int64N(3)}) // the same entry twice
			}
		}
		if len(reqs) == 0 {
			continue
		}
		at := time.Unix(0, now)
		got, gotOK, err := st.Decide(ctx, at, reqs, nil)
		if err != nil {
			t.Fatalf("event %d: redis: %v", i, err)
		}
		want, wantOK, err := loc.Decide(ctx, at, reqs, nil)
		if err != nil {
			t.Fatalf("event %d: local: %v", i, err)
		}
		if gotOK != wantOK || len(got) != len(want) {
			t.Fatalf("event %d (%v): redis allowed=%v, local allowed=%v\nredis %+v\nlocal %+v", i, describe(reqs), gotOK, wantOK, got, want)
		}
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("event %d, request %d (%v):\nredis %+v\nlocal %+v", i, j, describe(reqs), got[j], want[j])
			}
		}
		if gotOK {
			allowed++
			held = append(held, reqs)
		} else {
			denied++
		}
	}
	if allowed < n/10 || denied < 20 {
		t.Fatalf("trace too one-sided: %d allowed, %d denied", allowed, denied)
	}
	t.Logf("%d batches agreed: %d allowed, %d denied", allowed+denied, allowed, denied)
}

func describe(reqs []limiter.Request) string {
	s := ""
	for _, r := range reqs {
		s += fmt.Sprintf("[%s key %x cost %d] ", r.Policy.Name, r.Key[:2], r.Cost)
	}
	return s
}
