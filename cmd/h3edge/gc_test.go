package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
)

func TestCgroupLimit(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"max\n", 0, false},
		{"1073741824\n", 1 << 30, true},
		{"", 0, false},
		{"0\n", 0, false},
		{"-1\n", 0, false},
		{"12k\n", 0, false},
	} {
		got, ok := cgroupLimit(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("cgroupLimit(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestTuneGC: GOGC=400 unless the environment sets GOGC; an operator's value stays.
func TestTuneGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	oldLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(oldLimit) })

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "1GiB") // the limit is the operator's: left alone
	if gogc, limit := tuneGC(); gogc != gcPercent || limit != 0 {
		t.Errorf("tuneGC() = %d, %d; want %d, 0", gogc, limit, gcPercent)
	}
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC after tuneGC = %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != oldLimit {
		t.Errorf("memory limit changed to %d with GOMEMLIMIT set", got)
	}

	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150) // as the runtime read it at start
	if gogc, _ := tuneGC(); gogc != 0 {
		t.Errorf("tuneGC() with GOGC set = %d, want 0 (untouched)", gogc)
	}
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("GOGC after tuneGC = %d, want the operator's 150", got)
	}
}

// TestGCPercentFor: GOGC is 400 while the live heap is small (the throughput setting)
// and falls as it grows, so that garbage above it stays at gcHeadroom, never below
// Go's default of 100: 1 000 slow readers' 40 MiB live heap used to be allowed 160 MiB
// of garbage.
func TestGCPercentFor(t *testing.T) {
	for _, tt := range []struct {
		live uint64
		want int
	}{
		{0, gcPercent},
		{4 << 20, gcPercent},
		{12 << 20, gcPercent},
		{24 << 20, 200},
		{40 << 20, 120},
		{48 << 20, 100},
		{1 << 30, 100},
	} {
		got := gcPercentFor(tt.live)
		if got != tt.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", tt.live>>20, got, tt.want)
		}
		if tt.live >= 12<<20 && tt.live <= 48<<20 {
			if headroom := tt.live * uint64(got) / 100; headroom > gcHeadroom {
				t.Errorf("live %d MiB: GOGC %d allows %d MiB of garbage > %d MiB", tt.live>>20, got, headroom>>20, gcHeadroom>>20)
			}
		}
	}
}

// TestFollowHeap: with a live heap of 64 MiB, followHeap brings GOGC down to 100, and
// back to gcPercent once the heap is freed.
func TestFollowHeap(t *testing.T) {
	old := debug.SetGCPercent(gcPercent)
	defer debug.SetGCPercent(old)
	done := make(chan struct{})
	defer close(done)
	go followHeap(done)
	gogc := func() int { g := debug.SetGCPercent(-1); debug.SetGCPercent(g); return g }
	live := make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	runtime.GC()
	testkit.WaitFor(t, 10*time.Second, "GOGC 100 with 64 MiB live", func() bool { return gogc() == 100 })
	runtime.KeepAlive(live)
	live = nil
	runtime.GC()
	testkit.WaitFor(t, 10*time.Second, "GOGC back to gcPercent", func() bool { runtime.GC(); return gogc() == gcPercent })
}
