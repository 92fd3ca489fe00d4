package redisstore

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/limiter"
)

// One redis-server serves every benchmark of a run, so the modes compare on the same
// Redis. -rounds N runs the modes N times, interleaved (A B C D A B C D …; -count
// would repeat each mode before the next), as these shared VMs swing run to run:
//
//	go test ./limiter/redisstore/ -run '^$' -bench Decide -benchmem -rounds 5
var benchRounds = flag.Int("rounds", 1, "BenchmarkDecide: run the modes this many times, interleaved")

var benchRedis struct {
	once sync.Once
	cmd  *exec.Cmd
	addr string
	err  error
}

func benchServer(b *testing.B) string {
	bin := testkit.Need(b, "redis-server")
	benchRedis.once.Do(func() {
		port := testkit.Port(b)
		benchRedis.addr = "127.0.0.1:" + strconv.Itoa(port)
		benchRedis.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", b.TempDir())
		if benchRedis.err = benchRedis.cmd.Start(); benchRedis.err != nil {
			return
		}
		c := redis.NewClient(&redis.Options{Addr: benchRedis.addr})
		defer c.Close()
		for i := 0; ; i++ {
			if benchRedis.err = c.Ping(context.Background()).Err(); benchRedis.err == nil || i > 200 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if benchRedis.err != nil {
		b.Fatal(benchRedis.err)
	}
	return benchRedis.addr
}

func stopBenchRedis() {
	if benchRedis.cmd != nil && benchRedis.cmd.Process != nil {
		benchRedis.cmd.Process.Kill()
		benchRedis.cmd.Wait()
	}
}

// BenchmarkDecide: decisions per second and Redis script calls per decision at 64
// concurrent callers, on keys spread over 10,000 clients (all admitted), for
// github.com/go-redis/redis_rate/v10 Allow (one EVALSHA per request), this store with
// batching off (one EVALSHA per request) and on, and a key that stays over its limit
// (batching and the negative cache on).
func BenchmarkDecide(b *testing.B) {
	addr := benchServer(b)
	callers := 64
	const keys = 10000
	var ks [keys]limiter.Key
	var names [keys]string
	for i := range ks {
		ks[i] = keyOf("raw-bench-" + strconv.Itoa(i))
		names[i] = fmt.Sprintf("%x", ks[i][:8])
	}
	pol := mustPolicy(b, limiter.Policy{Name: "bench", Quota: 1_000_000, Window: time.Second})
	over := mustPolicy(b, limiter.Policy{Name: "bench-over", Quota: 1, Window: time.Hour})

	stats := redis.NewClient(&redis.Options{Addr: addr})
	defer stats.Close()
	run := func(b *testing.B, cnt *counter, decide func(i int) bool) {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.ReportAllocs()
		var next atomic.Int64
		s0 := cnt.scripts.Load()
		r0, g0 := redisCPU(stats), processCPU()
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				decide(int(next.Add(1)))
			}
		})
		el := time.Since(start)
		b.StopTimer()
		n := float64(b.N)
		b.ReportMetric(n/el.Seconds(), "decisions/s")
		b.ReportMetric(float64(cnt.scripts.Load()-s0)/n, "calls/decision")
		b.ReportMetric(float64(redisCPU(stats)-r0)/n/1e3, "redis-µs/decision")
		b.ReportMetric(float64(processCPU()-g0)/n/1e3, "go-µs/decision")
	}
	client := func(b *testing.B, cnt *counter) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2 * callers})
		c.AddHook(cnt)
		b.Cleanup(func() { c.Close() })
		return c
	}
	store := func(b *testing.B, cfg Config) *Store {
		st, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}
	decideWith := func(b *testing.B, st *Store, p *limiter.Policy, key func(i int) limiter.Key) func(int) bool {
		return func(i int) bool {
			_, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: p, Key: key(i), Cost: 1}}, nil)
			if err != nil {
				b.Error(err)
			}
			return ok
		}
	}
	spread := func(i int) limiter.Key { return ks[i%keys] }

	for range *benchRounds {
		b.Run("redis_rate", func(b *testing.B) {
			cnt := &counter{}
			lim := redis_rate.NewLimiter(client(b, cnt))
			limit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
			run(b, cnt, func(i int) bool {
				res, err := lim.Allow(context.Background(), names[i%keys], limit)
				if err != nil {
					b.Error(err)
					return false
				}
				return res.Allowed > 0
			})
		})
		b.Run("evalsha", func(b *testing.B) {
			cnt := &counter{}
			st := store(b, Config{Client: client(b, cnt), Batch: Batch{Disabled: true}, Timeout: time.Second, Heartbeat: time.Hour})
			run(b, cnt, decideWith(b, st, pol, spread))
		})
		b.Run("batched", func(b *testing.B) {
			cnt := &counter{}
			st := store(b, Config{Client: client(b, cnt), Timeout: time.Second, Heartbeat: time.Hour})
			run(b, cnt, decideWith(b, st, pol, spread))
		})
		b.Run("overlimit", func(b *testing.B) {
			cnt := &counter{}
			st := store(b, Config{Client: client(b, cnt), Timeout: time.Second, NegativeCache: true, Heartbeat: time.Hour})
			k := keyOf("raw-over")
			run(b, cnt, decideWith(b, st, over, func(int) limiter.Key { return k }))
		})
	}
}

// redisCPU returns the CPU time Redis has used, in ns (INFO cpu).
func redisCPU(c *redis.Client) int64 {
	var total float64
	for _, l := range strings.Split(c.Info(context.Background(), "cpu").Val(), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return int64(total * 1e9)
}

// processCPU returns the CPU time this process has used, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
