package testkit

import (
	"net"
	"syscall"
	"testing"
	"time"

	"strconv"
)

// TestFreePortDistinct: the ports FreePort hands out never repeat, so two servers of a
// scenario (or one server's public and admin ports) cannot be given the same port. A
// CI run once failed on exactly that: the kernel offered a port again after its probe.
// Each is free for TCP and UDP, below the ephemeral range.
func TestFreePortDistinct(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		p := Port(t)
		if seen[p] || p < 10000 || p >= 32768 {
			t.Fatalf("FreePort gave %d (seen before: %v)", p, seen[p])
		}
		seen[p] = true
	}
	p := Port(t)
	tl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("port %d not free for TCP: %v", p, err)
	}
	tl.Close()
	ul, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
	if err != nil {
		t.Fatalf("port %d not free for UDP: %v", p, err)
	}
	ul.Close()
}

// TestRedis: a started server answers PING; killed it does not; started again on its
// port it does; stopped with SIGSTOP it does not answer in time.
func TestRedis(t *testing.T) {
	r := StartRedis(t)
	if err := r.ping(); err != nil {
		t.Fatalf("after StartRedis: %v", err)
	}
	if r.URL() != "redis://"+r.Addr()+"/0" {
		t.Errorf("URL = %q", r.URL())
	}
	r.Kill()
	if err := r.ping(); err == nil {
		t.Fatal("a killed server answered PING")
	}
	r.Start()
	if err := r.ping(); err != nil {
		t.Fatalf("after Start again: %v", err)
	}
	r.Signal(syscall.SIGSTOP)
	start := time.Now()
	if err := r.ping(); err == nil {
		t.Fatal("a stopped server answered PING")
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Errorf("ping of a stopped server failed after %v, before its deadline", time.Since(start))
	}
	r.Signal(syscall.SIGCONT)
	WaitFor(t, 5*time.Second, "the continued server to answer", func() bool { return r.ping() == nil })
}

// TestNextPhase: the instant lies phase of the way into an epoch-aligned window, at or
// after t.
func TestNextPhase(t *testing.T) {
	base := time.Unix(1000, 0)
	for _, tt := range []struct {
		t     time.Time
		phase float64
		want  time.Time
	}{
		{base, 0, base},
		{base.Add(time.Millisecond), 0, base.Add(time.Second)},
		{base.Add(100 * time.Millisecond), 0.25, base.Add(250 * time.Millisecond)},
		{base.Add(300 * time.Millisecond), 0.25, base.Add(1250 * time.Millisecond)},
	} {
		if got := NextPhase(tt.t, time.Second, tt.phase); !got.Equal(tt.want) {
			t.Errorf("NextPhase(%v, 1s, %v) = %v, want %v", tt.t, tt.phase, got, tt.want)
		}
	}
}

// recorder is a T that records a fatal failure instead of ending the test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestCheckSVG(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		fail bool
	}{
		{`<svg xmlns="http://www.w3.org/2000/svg"><text>a &amp; b</text></svg>`, false},
		{`<svg><text>a & b</text></svg>`, true},
		{`<html></html>`, true},
	} {
		r := &recorder{TB: t}
		CheckSVG(r, []byte(tt.doc))
		if r.failed != tt.fail {
			t.Errorf("CheckSVG(%q) failed %v, want %v", tt.doc, r.failed, tt.fail)
		}
	}
}
