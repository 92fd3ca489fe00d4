package admission

import (
	"context"
	"net"
	"testing"
	"time"
)

// Over real loopback connections: over max_pending_connections the connection pending
// longest is reset and the new one admitted; one that was Served no longer counts as
// pending; over max_connections with none pending, the new one is reset.
func TestCaps(t *testing.T) {
	tcp := newTestTCP(t, nil)
	tcp.SetCaps(4, 2)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tcp.Listener(inner)
	defer ln.Close()
	// dial connects and returns the client side and the server side Accept returned.
	dial := func() (client, server net.Conn) {
		t.Helper()
		c := dialTCP(t, inner.Addr())
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	// reset reports whether the client side was reset (a read fails, not by timeout).
	reset := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		ne, ok := err.(net.Error)
		return err != nil && !(ok && ne.Timeout())
	}

	c1, s1 := dial()
	_, s2 := dial()
	tcp.Served(tcp.ConnContext(context.Background(), s2)) // s2 has a request: not pending
	c3, _ := dial()
	_, s4 := dial() // pending: s1, s3, s4 > 2 — s1, the oldest, is shed
	if !reset(c1) {
		t.Fatal("the oldest pending connection was not reset")
	}
	tcp.Release(s1) // as the server does once it sees the reset connection closed
	if open, pending := tcp.Counts(); open != 3 || pending != 2 {
		t.Errorf("open %d, pending %d; want 3 and 2", open, pending)
	}
	if r := tcp.Refused(); r.Pending != 1 || r.Open != 0 {
		t.Errorf("refused %+v, want one over max_pending_connections", r)
	}
	// Over max_connections (now 3): the pending one longest waiting (s3) is shed.
	tcp.SetCaps(3, 10)
	_, s5 := dial()
	if !reset(c3) {
		t.Fatal("over max_connections, the oldest pending connection was not reset")
	}
	// With none pending, the new connection itself is reset.
	tcp.SetCaps(1, 10)
	for _, s := range []net.Conn{s2, s4, s5} {
		tcp.Served(tcp.ConnContext(context.Background(), s))
	}
	go ln.Accept() // resets c6 and waits for the next, until ln is closed
	c6, err := net.Dial("tcp", inner.Addr().String())
	if err == nil { // the reset may also come before connect returns
		defer c6.Close()
	}
	if err == nil && !reset(c6) {
		t.Fatal("over max_connections with none pending, the new connection was not reset")
	}
	if r := tcp.Refused(); r.Open != 2 {
		t.Errorf("refused %+v, want two over max_connections", r)
	}
}
