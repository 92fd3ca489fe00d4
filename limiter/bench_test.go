package limiter

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// benchKeys is how many distinct keys the steady-state benchmarks cycle through.
const benchKeys = 1024

// BenchmarkDecide is one local decision, one policy, with the instant given. Each of
// 1024 keys asks about 1000 times a second: with quota 100 per second most requests
// are denied, with 2000 all are allowed.
func BenchmarkDecide(b *testing.B) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog, LeakyBucket, Concurrency} {
		for _, quota := range []int64{100, 2000} {
			b.Run(fmt.Sprintf("%s/quota=%d", alg, quota), func(b *testing.B) {
				benchmarkDecide(b, alg, quota)
			})
		}
	}
}

func benchmarkDecide(b *testing.B, alg Algorithm, quota int64) {
	{
		{
			p := mustPolicy(b, Policy{Name: "p", Algorithm: alg, Quota: quota, Window: time.Second})
			s := mustLocal(b, Config{MaxEntries: 100_000})
			reqs := make([]Request, benchKeys)
			for i := range reqs {
				reqs[i] = Request{Policy: p, Key: keyN(uint64(i)), Cost: 1}
			}
			out := make([]Decision, 0, 1)
			now := t0
			runtime.GC()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now = now.Add(time.Microsecond)
				req := reqs[i%benchKeys : i%benchKeys+1]
				out, _, _ = s.Decide(ctx, now, req, out[:0])
				if alg == Concurrency && out[0].Allowed {
					s.Release(ctx, req)
				}
			}
		}
	}
}

// BenchmarkXTimeRate is golang.org/x/time/rate on one limiter, for comparison:
// AllowN with the instant given, and Allow, which reads the clock.
func BenchmarkXTimeRate(b *testing.B) {
	b.Run("AllowN", func(b *testing.B) {
		lim := rate.NewLimiter(100, 100)
		now := t0
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			lim.AllowN(now, 1)
		}
	})
	b.Run("Allow", func(b *testing.B) {
		lim := rate.NewLimiter(100, 100)
		b.ReportAllocs()
		for b.Loop() {
			lim.Allow()
		}
	})
}

// BenchmarkDecide3 decides three policies together, as a request matching "burst",
// "daily" and "per-ip" would be, all allowed: keyed by one client key (one shard), or
// per-ip by the address (two shards to lock).
func BenchmarkDecide3(b *testing.B) {
	burst := mustPolicy(b, Policy{Name: "burst", Quota: 2000, Window: time.Second})
	daily := mustPolicy(b, Policy{Name: "daily", Algorithm: SlidingWindow, Quota: 1_000_000, Window: 24 * time.Hour})
	perIP := mustPolicy(b, Policy{Name: "per-ip", Algorithm: FixedWindow, Quota: 100_000, Window: time.Minute})
	for _, bc := range []struct {
		name   string
		ipBase uint64
	}{{"one key", 0}, {"key and address", 1 << 32}} {
		b.Run(bc.name, func(b *testing.B) {
			s := mustLocal(b, Config{MaxEntries: 100_000})
			batches := make([][3]Request, benchKeys)
			for i := range batches {
				k, ip := keyN(uint64(i)), keyN(bc.ipBase+uint64(i))
				batches[i] = [3]Request{{Policy: burst, Key: k, Cost: 1}, {Policy: daily, Key: k, Cost: 1}, {Policy: perIP, Key: ip, Cost: 1}}
			}
			out := make([]Decision, 0, 3)
			now := t0
			runtime.GC()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now = now.Add(time.Microsecond)
				out, _, _ = s.Decide(ctx, now, batches[i%benchKeys][:], out[:0])
			}
		})
	}
}

// BenchmarkDecideParallel decides from every core at once, each for a random one of
// 65,536 keys.
func BenchmarkDecideParallel(b *testing.B) {
	p := mustPolicy(b, Policy{Name: "p", Quota: 100, Window: time.Second})
	s := mustLocal(b, Config{MaxEntries: 1_000_000})
	b.ReportAllocs()
	const keys = 1 << 16
	reqs := make([]Request, keys)
	for i := range reqs {
		reqs[i] = Request{Policy: p, Key: keyN(uint64(i)), Cost: 1}
		s.Decide(ctx, t0, reqs[i:i+1], nil) // every key has its entry already
	}
	runtime.GC() // so no collection of the warm-up's garbage runs during the measurement
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]Decision, 0, 1)
		now := t0
		seed := uint64(time.Now().UnixNano())
		for pb.Next() {
			seed = seed*6364136223846793005 + 1442695040888963407
			now = now.Add(time.Microsecond)
			i := seed >> 48 // a random one of the keys
			out, _, _ = s.Decide(ctx, now, reqs[i:i+1], out[:0])
		}
	})
}

// BenchmarkEvict adds a new key on every decision to a full table: sweep, eviction and
// insertion on each.
func BenchmarkEvict(b *testing.B) {
	p := mustPolicy(b, Policy{Name: "p", Quota: 10, Window: time.Minute})
	s := mustLocal(b, Config{MaxEntries: 100_000})
	reqs := make([]Request, 1)
	out := make([]Decision, 0, 1)
	for i := range uint64(100_000) {
		reqs[0] = Request{Policy: p, Key: keyN(1<<40 + i), Cost: 1}
		out, _, _ = s.Decide(ctx, t0, reqs, out[:0])
	}
	now := t0
	runtime.GC()
	b.ReportAllocs()
	for i := uint64(0); b.Loop(); i++ {
		now = now.Add(time.Microsecond)
		reqs[0] = Request{Policy: p, Key: keyN(i), Cost: 1}
		out, _, _ = s.Decide(ctx, now, reqs, out[:0])
	}
}
