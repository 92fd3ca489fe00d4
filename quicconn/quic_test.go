package quicconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"

	"github.com/h3edge/h3edge/bench/testkit"
)

// The tests below run real quic-go clients and servers on loopback, each client bound to
// its own 127.0.0.x source address.

func TestConnBudget(t *testing.T) {
	// Three connections, then nothing for 1000 s.
	srv := startServer(t, Config{ConnRate: 0.001, ConnBurst: 3, MaxConnections: -1, RetryAbove: -1}, serverOpts{})
	a, b := newClient(t, "127.0.0.2"), newClient(t, "127.0.0.3")
	for range 3 {
		a.mustDial(t, srv.addr)
	}
	_, err := a.dial(t, srv.addr, dialOpts{})
	if !isRefused(err) {
		t.Fatalf("4th connection from %s: err = %v, want CONNECTION_REFUSED", a.addr, err)
	}
	for range 3 {
		b.mustDial(t, srv.addr)
	}
	seen := srv.admissions(a.addr)
	if last := seen[len(seen)-1]; !errors.Is(last.err, ErrRate) || !last.verified {
		t.Errorf("refused attempt: %+v, want ErrRate after a Retry (verified)", last)
	}
	st := srv.g.Stats()
	// Counted per Initial: a first flight with a post-quantum key share spans two.
	if st.RefusedRate == 0 || st.RetriesSource == 0 || st.Open != 6 {
		t.Errorf("stats %+v, want RefusedRate > 0, RetriesSource > 0, Open 6", st)
	}
}

func TestMaxConnections(t *testing.T) {
	srv := startServer(t, Config{ConnRate: -1, MaxConnections: 3}, serverOpts{})
	a := newClient(t, "127.0.0.4")
	var conns []*quic.Conn
	for range 3 {
		conns = append(conns, a.mustDial(t, srv.addr))
	}
	if _, err := a.dial(t, srv.addr, dialOpts{}); !isRefused(err) {
		t.Fatalf("4th concurrent connection: err = %v, want CONNECTION_REFUSED", err)
	}
	if st := srv.g.Stats(); st.RefusedMaxConns == 0 {
		t.Errorf("RefusedMaxConns = 0")
	}
	conns[0].CloseWithError(0, "")
	testkit.WaitFor(t, 2*time.Second, "slot released", func() bool { return srv.g.Stats().Open == 2 })
	conns[0] = a.mustDial(t, srv.addr)
	for _, c := range conns {
		c.CloseWithError(0, "")
	}
	testkit.WaitFor(t, 2*time.Second, "all slots released", func() bool { return srv.g.Stats().Open == 0 })
}

// TestNoSlotLeak opens and ends 200 connections — closed by the client, failing the TLS
// handshake (wrong ALPN), abandoned mid-handshake — and expects every slot back. An
// abandoned dial sends no CONNECTION_CLOSE, so the server's connection lives until its
// handshake or idle timeout, kept short here.
func TestNoSlotLeak(t *testing.T) {
	srv := startServer(t, Config{ConnRate: -1, MaxConnections: 64, RetryAbove: -1}, serverOpts{
		qconf: &quic.Config{HandshakeIdleTimeout: 200 * time.Millisecond, MaxIdleTimeout: 300 * time.Millisecond},
	})
	const workers, cycles = 8, 200
	var clients []*client
	for i := range workers {
		clients = append(clients, newClient(t, fmt.Sprintf("127.0.0.%d", 10+i)))
	}
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := clients[w]
			for i := w; i < cycles; i += workers {
				switch i % 8 {
				case 0: // TLS handshake fails on the server: no common ALPN.
					if _, err := c.dial(t, srv.addr, dialOpts{alpn: "nope"}); err == nil {
						t.Errorf("dial with a wrong ALPN succeeded")
					}
					failed.Add(1)
				case 1: // the client gives up mid-handshake and never says so
					ctx, cancel := context.WithTimeout(context.Background(), 500*time.Microsecond)
					if conn, err := c.dial(t, srv.addr, dialOpts{ctx: ctx}); err == nil {
						conn.CloseWithError(0, "")
					}
					cancel()
					failed.Add(1)
				default:
					conn, err := c.dial(t, srv.addr, dialOpts{})
					if err != nil {
						// The server's 200 ms handshake timeout can end a handshake on a
						// machine loaded (or race-built) enough: one more abandoned
						// handshake, whose slot must come back like the others.
						t.Logf("dial: %v", err)
						failed.Add(1)
						continue
					}
					conn.CloseWithError(0, "")
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("open right after the cycles: %d", srv.g.Stats().Open)
	testkit.WaitFor(t, 5*time.Second, "all slots released", func() bool { return srv.g.Stats().Open == 0 })
	t.Logf("%d closed, %d failed or abandoned; stats %+v", ok.Load(), failed.Load(), srv.g.Stats())
	if want := int64(cycles * 6 / 8); ok.Load() < want/2 {
		t.Errorf("%d of %d handshakes that should complete did", ok.Load(), want)
	}
}

func TestBanFilter(t *testing.T) {
	var bans banList
	srv := startServer(t, Config{Banned: bans.banned}, serverOpts{})
	a, b := newClient(t, "127.0.0.5"), newClient(t, "127.0.0.6")
	bans.ban(a.addr, true)

	_, err := a.dial(t, srv.addr, dialOpts{handshake: 300 * time.Millisecond})
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("banned source: err = %v, want a handshake timeout", err)
	}
	if n := a.spy.n.Load(); n != 0 {
		t.Errorf("banned source received %d datagrams, want 0", n)
	}
	if seen := srv.admissions(a.addr); len(seen) != 0 {
		t.Errorf("ConnContext saw the banned source: %+v", seen)
	}
	if st := srv.g.Stats(); st.DroppedBanned == 0 {
		t.Errorf("DroppedBanned = 0")
	}
	b.mustDial(t, srv.addr)

	bans.ban(a.addr, false)
	a.mustDial(t, srv.addr)
}

func TestRetry(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAbove float64
		wantRetry  bool
	}{
		{"surge", 1e-9, true},
		{"calm", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, Config{RetryAbove: tc.retryAbove}, serverOpts{})
			c := newClient(t, "127.0.0.7")
			c.mustDial(t, srv.addr)
			// quic-go calls ConnContext with AddrVerified only for an Initial that
			// carries a valid token, which a fresh client has only after a Retry.
			seen := srv.admissions(c.addr)
			if len(seen) != 1 || seen[0].verified != tc.wantRetry {
				t.Errorf("admissions %+v, want one with verified = %v", seen, tc.wantRetry)
			}
			if got := srv.g.Stats().RetriesSurge > 0; got != tc.wantRetry {
				t.Errorf("RetriesSurge > 0 = %v, want %v", got, tc.wantRetry)
			}
		})
	}
}

func TestKick(t *testing.T) {
	var bans banList
	srv := startServer(t, Config{Banned: bans.banned}, serverOpts{})
	a, b := newClient(t, "127.0.0.8"), newClient(t, "127.0.0.9")
	var conns []*quic.Conn
	for range 3 {
		conns = append(conns, a.mustDial(t, srv.addr))
	}
	other := b.mustDial(t, srv.addr)
	// Connections are tracked once the accept loop has them.
	testkit.WaitFor(t, time.Second, "connections tracked", func() bool {
		return srv.tracked(a.addr) == 3 && srv.tracked(b.addr) == 1
	})

	start := time.Now()
	bans.ban(a.addr, true)
	if n := srv.g.Kick(netip.PrefixFrom(a.addr, 32)); n != 3 {
		t.Errorf("Kick closed %d connections, want 3", n)
	}
	for _, c := range conns {
		select {
		case <-c.Context().Done():
		case <-time.After(time.Until(start.Add(100 * time.Millisecond))):
			t.Fatalf("connection of the banned source still open after 100ms")
		}
		var ae *quic.ApplicationError
		if err := context.Cause(c.Context()); !errors.As(err, &ae) || ae.ErrorCode != ErrCodeExcessiveLoad {
			t.Errorf("close cause %v, want application error 0x107", err)
		}
	}
	t.Logf("3 connections closed in %v", time.Since(start))
	if other.Context().Err() != nil {
		t.Fatalf("neighbour's connection closed")
	}

	// A prefix wider than one source: the shards are scanned.
	if n := srv.g.Kick(netip.MustParsePrefix("127.0.0.8/29")); n != 1 {
		t.Errorf("Kick(127.0.0.8/29) closed %d, want 1", n)
	}
	select {
	case <-other.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("connection in the kicked prefix still open")
	}
	if st := srv.g.Stats(); st.Kicked != 4 {
		t.Errorf("Kicked = %d, want 4", st.Kicked)
	}
}

// tracked counts addr's connections registered by Track.
func (s *testServer) tracked(addr netip.Addr) int {
	k := s.g.tab.key(addr)
	sh := s.g.tab.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for sl := sh.conns[k]; sl != nil; sl = sl.next {
		if sl.conn.Load() != nil {
			n++
		}
	}
	return n
}

// spyConn is a Socket that counts which read path quic-go takes.
type spyConn struct {
	*Socket
	batches, singles atomic.Int64
}

func (s *spyConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	s.batches.Add(1)
	return s.Socket.ReadBatch(ms, flags)
}

func (s *spyConn) ReadFrom(b []byte) (int, net.Addr, error) {
	s.singles.Add(1)
	return s.Socket.ReadFrom(b)
}

func (s *spyConn) ReadMsgUDP(b, oob []byte) (int, int, int, *net.UDPAddr, error) {
	s.singles.Add(1)
	return s.Socket.ReadMsgUDP(b, oob)
}

// The interfaces quic-go type-asserts in sys_conn.go and sys_conn_oob.go.
var (
	_ quic.OOBCapablePacketConn = (*Socket)(nil)
	_ batchReader               = (*Socket)(nil)
	_ net.Conn                  = (*Socket)(nil)
)

func TestFastPath(t *testing.T) {
	var pc net.PacketConn = &Socket{}
	if _, ok := pc.(quic.OOBCapablePacketConn); !ok {
		t.Fatal("Socket is not a quic.OOBCapablePacketConn: quic-go would drop to one syscall per packet")
	}
	if _, ok := pc.(interface {
		ReadBatch([]ipv4.Message, int) (int, error)
	}); !ok {
		t.Fatal("Socket has no ReadBatch: quic-go would read the raw socket and skip the filter")
	}

	for _, tc := range []struct {
		name, listen, client, banned, neighbour string
	}{
		{"ipv4", "127.0.0.1:0", "127.0.0.20", "127.0.0.21", "127.0.0.22"},
		{"ipv6", "[::1]:0", "::1", "::1", ""},
		{"dual-stack", "[::]:0", "127.0.0.23", "127.0.0.24", "127.0.0.25"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bans banList
			var spy *spyConn
			srv := startServer(t, Config{Banned: bans.banned}, serverOpts{
				listen: tc.listen,
				conn:   func(s *Socket) net.PacketConn { spy = &spyConn{Socket: s}; return spy },
			})
			to := srv.addr
			if tc.name == "dual-stack" {
				to = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: srv.addr.Port}
			}
			newClient(t, tc.client).mustDial(t, to)
			if spy.batches.Load() == 0 || spy.singles.Load() != 0 {
				t.Errorf("ReadBatch calls %d, single reads %d: want the batch path only",
					spy.batches.Load(), spy.singles.Load())
			}

			c := newClient(t, tc.banned)
			bans.ban(c.addr, true)
			if _, err := c.dial(t, to, dialOpts{handshake: 200 * time.Millisecond}); err == nil {
				t.Fatal("banned source connected")
			}
			if srv.g.Stats().DroppedBanned == 0 || c.spy.n.Load() != 0 {
				t.Errorf("dropped %d, banned client received %d", srv.g.Stats().DroppedBanned, c.spy.n.Load())
			}
			if tc.neighbour != "" {
				newClient(t, tc.neighbour).mustDial(t, to)
			}
		})
	}
}
