package logsample

import (
	"testing"
	"time"
)

// TestSampler: at most limit events per wall-clock second, with the count of those
// held back handed to the next one let through.
func TestSampler(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := New(2)
	type step struct {
		at         time.Duration
		ok         bool
		suppressed uint64
	}
	for i, st := range []step{
		{0, true, 0},
		{100 * time.Millisecond, true, 0},
		{200 * time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0},
		{time.Second, true, 2}, // a new second: the two held back are reported
		{1500 * time.Millisecond, true, 0},
		{1600 * time.Millisecond, false, 0},
		{5 * time.Second, true, 1},
		{4 * time.Second, true, 0}, // a clock stepping back starts a new count
	} {
		ok, n := s.Allow(t0.Add(st.at))
		if ok != st.ok || n != st.suppressed {
			t.Errorf("step %d at t0+%v: allow = %v, %d; want %v, %d", i, st.at, ok, n, st.ok, st.suppressed)
		}
	}
	if ok, _ := New(0).Allow(t0); ok {
		t.Error("a sampler of limit 0 let an event through")
	}
}
