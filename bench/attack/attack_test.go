package attack

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

// TestRunStopsByItself runs each HTTP/2 and HTTP/1.1 attack for 300 ms against a
// plain Go HTTPS server on loopback: each sends something and returns within its
// duration and a bound for its connections to wind down.
func TestRunStopsByItself(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bytes" { // slow-read's: something to read slowly
			w.Write(make([]byte, 64<<10))
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	for _, a := range attacks {
		if a.Proto == "h3" {
			continue // needs a QUIC server; h3bench's TestAttacks runs it against h3edge
		}
		t.Run(a.Name, func(t *testing.T) {
			const d = 300 * time.Millisecond
			start := time.Now()
			out, err := a.Run(context.Background(), Target{
				Addr: addr, Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Conns: 1,
				TLS: &tls.Config{InsecureSkipVerify: true}, Duration: d, Interval: 50 * time.Millisecond,
				SampleEvery: 100 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > d+10*time.Second { // connections wind down; slower under -race
				t.Errorf("ran %v, want about %v", took, d)
			}
			if out.Conns == 0 || out.Sent == 0 {
				t.Errorf("nothing sent: %+v", out)
			}
			// The time series: a sample per 100 ms of the attack and one at its end,
			// adding up to the total.
			var sum int64
			for _, n := range out.SentPerSample {
				sum += n
			}
			if n := len(out.SentPerSample); n < 3 || n != len(out.OpenPerSample) || sum != out.Sent {
				t.Errorf("%d samples (%d of open) adding up to %d, want ≥ 3 adding up to Sent %d", n, len(out.OpenPerSample), sum, out.Sent)
			}
			if out.Start.Before(start) || out.Start.After(start.Add(d)) || out.SampleEvery != 100*time.Millisecond {
				t.Errorf("start %v (run began %v), sample every %v", out.Start, start, out.SampleEvery)
			}
		})
	}
}

// TestRunNeedsATarget: no duration, no sources, no address — no attack.
func TestRunNeedsATarget(t *testing.T) {
	a, err := Lookup("ping-flood")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(context.Background(), Target{}); err == nil {
		t.Error("Run without a target: no error")
	}
	if _, err := Lookup("no-such-attack"); err == nil {
		t.Error("Lookup of an unknown name: no error")
	}
}
