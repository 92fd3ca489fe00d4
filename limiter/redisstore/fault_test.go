package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/limiter"
)

// perfBounds reports whether the tests assert their tight timing bounds: only with
// H3EDGE_PERF=1, on a machine the test has to itself. Otherwise they assert bounds 20×
// looser, which a loaded 2-core CI machine meets and a build that ignores Timeout or
// never closes its breaker does not.
func perfBounds() bool { return os.Getenv("H3EDGE_PERF") == "1" }

// looseFactor is how much looser a timing bound is without H3EDGE_PERF=1.
const looseFactor = 20

// timingBound returns d with H3EDGE_PERF=1 and looseFactor × d otherwise.
func timingBound(d time.Duration) time.Duration {
	if perfBounds() {
		return d
	}
	return looseFactor * d
}

// TestFaults kills (SIGKILL) or hangs (SIGSTOP) redis-server under a bounded load:
// every error must wrap ErrUnavailable, the breaker must open, and once Redis is back
// (restarted, or SIGCONT) decisions must resume and be exact. With H3EDGE_PERF=1 no
// decision may wait longer than Timeout + 5ms at p99 and decisions resume within 2s;
// without, the bounds are 20× looser (a go-redis read that ignored Timeout would
// still wait its 3 s default).
func TestFaults(t *testing.T) {
	for _, mode := range []string{"SIGKILL", "SIGSTOP"} {
		t.Run(mode, func(t *testing.T) {
			srv := testkit.StartRedis(t)
			const timeout = 20 * time.Millisecond
			var mu sync.Mutex
			var changes []string
			st := newStore(t, Config{URL: srv.URL(), Timeout: timeout, Breaker: BreakerConfig{
				OnChange: func(from, to BreakerState) {
					mu.Lock()
					changes = append(changes, fmt.Sprintf("%v→%v", from, to))
					mu.Unlock()
				}}})
			pol := mustPolicy(t, limiter.Policy{Name: "fault", Quota: 1000, Window: time.Second})

			type sample struct {
				at  time.Time
				lat time.Duration
				err error
			}
			var smu sync.Mutex
			var samples []sample
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var n atomic.Int64
			for g := range 16 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						k := keyOf(fmt.Sprint("raw-fault-", g, "-", i%50))
						start := time.Now()
						_, _, err := st.Decide(context.Background(), start, []limiter.Request{{Policy: pol, Key: k, Cost: 1}}, nil)
						lat := time.Since(start)
						n.Add(1)
						smu.Lock()
						samples = append(samples, sample{start, lat, err})
						smu.Unlock()
						time.Sleep(time.Millisecond)
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			faultAt := time.Now()
			if mode == "SIGKILL" {
				srv.Kill()
			} else {
				srv.Signal(syscall.SIGSTOP)
			}
			time.Sleep(time.Second)
			backAt := time.Now()
			if mode == "SIGKILL" {
				srv.Start()
			} else {
				srv.Signal(syscall.SIGCONT)
			}
			// Wait for the first successful decision after Redis is back.
			var resumed time.Duration
			for {
				time.Sleep(5 * time.Millisecond)
				smu.Lock()
				for _, s := range samples {
					if s.at.After(backAt) && s.err == nil {
						resumed = s.at.Add(s.lat).Sub(backAt)
						break
					}
				}
				smu.Unlock()
				if resumed > 0 || time.Since(backAt) > timingBound(2*time.Second)+time.Second {
					break
				}
			}
			close(stop)
			wg.Wait()

			var during []time.Duration
			var failed int
			for _, s := range samples {
				if s.err != nil {
					failed++
					if !errors.Is(s.err, ErrUnavailable) {
						t.Errorf("error not wrapping ErrUnavailable: %v", s.err)
					}
				}
				if !s.at.Before(faultAt) && s.at.Before(backAt) {
					during = append(during, s.lat)
				}
			}
			slices.Sort(during)
			p99 := during[len(during)*99/100]
			mu.Lock()
			seen := slices.Clone(changes)
			mu.Unlock()
			t.Logf("%s: %d decisions, %d failed; during the fault %d decisions, p50 %v, p99 %v, max %v; resumed %v after recovery; breaker %v",
				mode, n.Load(), failed, len(during), during[len(during)/2], p99, during[len(during)-1], resumed, seen)
			if bound := timingBound(timeout + 5*time.Millisecond); p99 > bound {
				t.Errorf("p99 latency during the fault %v, over %v (Timeout + 5ms = %v; H3EDGE_PERF=%v)", p99, bound, timeout+5*time.Millisecond, perfBounds())
			}
			if !slices.Contains(seen, "closed→open") {
				t.Errorf("breaker never opened: %v", seen)
			}
			if bound := timingBound(2 * time.Second); resumed == 0 || resumed > bound {
				t.Fatalf("decisions did not resume within %v of recovery (resumed after %v)", bound, resumed)
			}
			if st.Breaker() != BreakerClosed {
				t.Fatalf("breaker %v after recovery", st.Breaker())
			}
			// Exact again: a fresh key admits exactly its quota.
			fw := mustPolicy(t, limiter.Policy{Name: "fault-exact", Algorithm: limiter.FixedWindow, Quota: 10, Window: time.Hour})
			awayFromBoundary(t, time.Hour)
			admitted := 0
			for range 30 {
				_, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: fw, Key: keyOf("raw-exact"), Cost: 1}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					admitted++
				}
			}
			if admitted != 10 {
				t.Fatalf("after recovery admitted %d, want 10", admitted)
			}
		})
	}
}

// TestBreakerAtStart: a store whose Redis is down at start still starts, fails fast
// with ErrCircuitOpen, and closes its breaker once Redis comes up.
func TestBreakerAtStart(t *testing.T) {
	srv := testkit.StartRedis(t)
	srv.Kill()
	st := newStore(t, Config{URL: srv.URL(), Timeout: 20 * time.Millisecond})
	pol := mustPolicy(t, limiter.Policy{Name: "start", Quota: 10, Window: time.Second})
	_, _, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: pol, Key: keyOf("raw-x"), Cost: 1}}, nil)
	if !errors.Is(err, ErrCircuitOpen) || st.Breaker() != BreakerOpen {
		t.Fatalf("got %v, breaker %v; want ErrCircuitOpen", err, st.Breaker())
	}
	srv.Start()
	bound := timingBound(2 * time.Second)
	deadline := time.Now().Add(bound)
	for st.Breaker() != BreakerClosed {
		if time.Now().After(deadline) {
			t.Fatalf("breaker still open %v after Redis started", bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: pol, Key: keyOf("raw-x"), Cost: 1}}, nil); err != nil || !ok {
		t.Fatalf("after start: %v, %v", ok, err)
	}
}

// TestSentinel: the store finds its master through Redis Sentinel.
func TestSentinel(t *testing.T) {
	master := testkit.StartRedis(t)
	s := testkit.StartSentinel(t, fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 1\n", master.Port))
	st := newStore(t, Config{Sentinel: &Sentinel{Master: "mymaster", Addrs: []string{s.Addr()}}, Timeout: time.Second})
	pol := mustPolicy(t, limiter.Policy{Name: "sentinel", Algorithm: limiter.FixedWindow, Quota: 2, Window: time.Hour})
	awayFromBoundary(t, time.Hour)
	var admitted int
	for range 4 {
		_, ok, err := st.Decide(context.Background(), time.Now(), []limiter.Request{{Policy: pol, Key: keyOf("raw-s"), Cost: 1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("admitted %d, want 2", admitted)
	}
	if n := clientOf(t, master).DBSize(context.Background()).Val(); n == 0 {
		t.Fatal("nothing stored on the master")
	}
}
