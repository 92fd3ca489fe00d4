package h2guard

import (
	"crypto/tls"
	"net"
	"net/http/httptest"
	"testing"
	"time"
)

// TestHandshakeGate: with one handshake slot, Accept waits while a connection's
// handshake is in progress — here a client that never sends its ClientHello — and
// goes on once that connection's hold (handshakeHold) has passed, so a stalled client
// delays the next one by 20 ms, not by the handshake timeout. Without the gate the
// second Accept returns at once, and a burst of handshakes all runs at once.
func TestHandshakeGate(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS() // for its certificate
	defer ts.Close()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := NewListener(tls.NewListener(raw, &tls.Config{Certificates: ts.TLS.Certificates}), Config{Handshakes: 1})
	defer ln.Close()

	stalled, err := net.Dial("tcp", raw.Addr().String()) // connects, never speaks TLS
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	t0 := time.Now()
	go func() { // a client that completes its handshake
		c, err := tls.Dial("tcp", raw.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			c.Close()
		}
	}()
	second, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	waited := time.Since(t0)
	if waited < handshakeHold-2*time.Millisecond {
		t.Errorf("second Accept after %v: it did not wait for the first connection's handshake slot (%v)", waited, handshakeHold)
	}
	if waited > 5*time.Second {
		t.Errorf("second Accept after %v: a stalled handshake held its slot past handshakeHold", waited)
	}
	// The slot of a handshake that ends is given back: the second connection's
	// handshake completes, and a third Accept is not held up by it.
	done := make(chan error, 1)
	go func() { done <- second.(*Conn).HandshakeContext(t.Context()) }()
	if err := <-done; err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if got := len(ln.(*listener).gate); got > 1 {
		t.Errorf("%d slots held, want at most 1", got)
	}
	ln.Close()
	if _, err := ln.Accept(); err == nil {
		t.Error("Accept on a closed listener: no error")
	}
}
