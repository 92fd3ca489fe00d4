package admission

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/quicconn"
)

// Over real loopback connections: the cap resets the connection over it at accept,
// Release gives a slot back, a banned source is reset, and Kick closes what is open.
func TestTCP(t *testing.T) {
	cfg := config.Default()
	cfg.ApplyDefaults()
	gc := GuardConfig(cfg.IP)
	gc.MaxConnections = 1
	g, err := quicconn.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	var banned atomic.Bool
	tcp := NewTCP(g, func(netip.Addr) bool { return banned.Load() })
	tcp.tarpit.hold = 0 // a banned source's connection reset at once (TestTarpit holds them)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tcp.Listener(inner)
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn { return dialTCP(t, inner.Addr()) }
	// refused dials and reports whether the edge reset the connection: the RST comes
	// before connect returns (it is sent at accept, which may win the race), or a read
	// sees it — not a timeout.
	refused := func() bool {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if errors.Is(err, syscall.ECONNRESET) {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, io.EOF)
	}

	dial()
	server := <-accepted
	if !refused() {
		t.Fatal("a connection over the cap of 1 was not reset")
	}
	if r := tcp.Refused(); r.MaxConns != 1 || r.Banned != 0 {
		t.Errorf("refused %+v, want one over the cap", r)
	}
	server.Close()
	tcp.Release(server)
	dial()
	server = <-accepted // the slot came back
	banned.Store(true)
	if !refused() || tcp.Refused().Banned != 1 {
		t.Errorf("a banned source's connection was not reset (refused %+v)", tcp.Refused())
	}
	if n := tcp.Kick(netip.MustParsePrefix("127.0.0.0/8")); n != 1 {
		t.Errorf("Kick closed %d connections, want the one open", n)
	}
	if _, err := server.Write([]byte("x")); err == nil {
		t.Error("a kicked connection still writes")
	}
}

// TestTarpit, over real loopback connections: a banned source's connection is held,
// neither served nor reset, until the tarpit is full; then the one held longest is
// reset to make room.
func TestTarpit(t *testing.T) {
	tcp := newTestTCP(t, func(netip.Addr) bool { return true })
	tcp.tarpit.hold, tcp.tarpit.max = time.Hour, 1
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tcp.Listener(inner)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil { // never: every source is banned
			c.Close()
			t.Error("a banned source's connection was accepted")
		}
	}()
	dial := func() net.Conn { return dialTCP(t, inner.Addr()) }
	first := dial()
	testkit.WaitFor(t, 5*time.Second, "the first connection to be held", func() bool { return tcp.Tarpitted() == 1 })
	first.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := first.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("a held connection: read %v, want nothing (a timeout)", err)
	}
	second := dial()
	first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := first.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the connection held longest, the tarpit full: read %v, want a reset", err)
	}
	if n := tcp.Tarpitted(); n != 1 {
		t.Errorf("%d held, want the second only", n)
	}
	second.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := second.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("the second connection: read %v, want nothing (a timeout)", err)
	}
	if r := tcp.Refused(); r.Banned != 2 {
		t.Errorf("refused %+v, want two banned", r)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
