package main

import (
	"runtime/debug"
	"testing"
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
