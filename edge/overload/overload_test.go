package overload

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
)

// TestGoroutines: shedding starts when the goroutines reach MaxGoroutines and stops
// once they fall below 90 % of it.
func TestGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	s := New(Config{MaxGoroutines: base + 100, Interval: 5 * time.Millisecond})
	done := make(chan struct{})
	defer close(done)
	go s.Run(done)
	testkit.WaitFor(t, 5*time.Second, "a first sample", func() bool { return s.Stats().Goroutines > 0 })
	if s.Shedding() {
		t.Fatalf("shedding at %d goroutines of %d: %+v", runtime.NumGoroutine(), base+100, s.Stats())
	}
	release := make(chan struct{})
	for range 150 {
		go func() { <-release }()
	}
	testkit.WaitFor(t, 5*time.Second, "shedding over MaxGoroutines", s.Shedding)
	if st := s.Stats(); st.Reason != Goroutines || st.Episodes != 1 {
		t.Errorf("stats %+v, want reason goroutines, one episode", st)
	}
	close(release)
	testkit.WaitFor(t, 5*time.Second, "no shedding once they end", func() bool { return !s.Shedding() })
}

// TestMemory: shedding starts at 90 % of the memory limit, whenever the limit was set,
// and stops below 80 %; without a limit memory never sheds.
func TestMemory(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	debug.SetMemoryLimit(math.MaxInt64)
	s := New(Config{Memory: true, Interval: 5 * time.Millisecond})
	done := make(chan struct{})
	defer close(done)
	go s.Run(done)
	testkit.WaitFor(t, 5*time.Second, "a first sample", func() bool { return s.Stats().MemoryUsed > 0 })
	if s.Shedding() {
		t.Fatalf("shedding without a memory limit: %+v", s.Stats())
	}
	used := s.Stats().MemoryUsed
	debug.SetMemoryLimit(used * 21 / 20) // 95 %: over the first threshold
	testkit.WaitFor(t, 5*time.Second, "shedding near the memory limit", s.Shedding)
	if st := s.Stats(); st.Reason != Memory {
		t.Errorf("stats %+v, want reason memory", st)
	}
	debug.SetMemoryLimit(used * 2) // 50 %
	testkit.WaitFor(t, 5*time.Second, "no shedding once the limit is far", func() bool { return !s.Shedding() })
}

// BenchmarkShedding: what a request pays to ask.
func BenchmarkShedding(b *testing.B) {
	s := New(Config{MaxGoroutines: 1 << 20})
	b.ReportAllocs()
	for b.Loop() {
		if s.Shedding() {
			b.Fatal("shedding")
		}
	}
}
