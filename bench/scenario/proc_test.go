package scenario

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
)

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		ok   bool
	}{
		// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime …
		{"42 (h3edge) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 123 456 789", 3 * time.Second, true},
		{"7 (a b) (c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0", 30 * time.Millisecond, true},
		{"7 no parens", 0, false},
		{"7 (x) S 1 2", 0, false},
		{"7 (x) S 1 7 7 0 -1 0 0 0 0 0 a 2 0 0", 0, false},
	} {
		got, err := parseProcStat([]byte(tc.line))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseProcStat(%q) = %v, %v; want %v, ok %v", tc.line, got, err, tc.want, tc.ok)
		}
	}
}

func TestProcessCPUAndMemory(t *testing.T) {
	testkit.Require(t, "Linux (/proc)", runtime.GOOS == "linux")
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn 100 ms of CPU, as getrusage counts it (not of wall time: on a busy machine
	// this thread may get half a core or less), for at most 10 s.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	ru0, deadline := cpu(), time.Now().Add(10*time.Second)
	x := 0
	for cpu()-ru0 < 100*time.Millisecond && time.Now().Before(deadline) {
		for i := range 100000 {
			x += i
		}
	}
	burnt := cpu() - ru0
	after, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in 10 ms ticks: allow a few of them either way.
	if d := after - before; d < burnt-30*time.Millisecond || d > burnt+30*time.Millisecond {
		t.Errorf("CPU grew by %v in /proc while getrusage counted %v (x=%d)", d, burnt, x)
	}
	rss, peak, err := ProcessMemory(os.Getpid())
	if err != nil || rss <= 0 || peak < rss {
		t.Errorf("memory rss %d peak %d, %v", rss, peak, err)
	}
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Error("no error for a missing process")
	}
}

func TestStartProcessFailures(t *testing.T) {
	_, err := exec.LookPath("sh")
	testkit.Require(t, "sh", err == nil)
	ctx := t.Context()
	// Exits before it is ready: the error carries its output.
	_, _, err = startProcess(ctx, "quitter", []string{"sh", "-c", "echo boom; exit 3"}, nil,
		func(string) bool { return false }, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v, want the output", err)
	}
	// Never ready: stopped after the timeout.
	start := time.Now()
	_, _, err = startProcess(ctx, "sleeper", []string{"sh", "-c", "echo waiting; sleep 30"}, nil,
		func(string) bool { return false }, 200*time.Millisecond)
	if err == nil || time.Since(start) > 6*time.Second {
		t.Errorf("err = %v after %v", err, time.Since(start))
	}
	// Ready: the line is returned, and stop ends it.
	p, line, err := startProcess(ctx, "server", []string{"sh", "-c", "echo x serving spki_pin=y; sleep 30"}, []string{"A=1"},
		func(l string) bool { return strings.Contains(l, "serving") }, 5*time.Second)
	if err != nil || line != "x serving spki_pin=y" {
		t.Fatalf("line %q, %v", line, err)
	}
	if p.alive() != nil {
		t.Error("not alive")
	}
	p.stop()
	if p.alive() == nil {
		t.Error("alive after stop")
	}
}
