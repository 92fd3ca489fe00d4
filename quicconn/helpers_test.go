package quicconn

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"

	"github.com/h3edge/h3edge/certs"
)

const alpn = "quicconn-test"

var (
	certOnce sync.Once
	cert     tls.Certificate
)

func serverTLS(t testing.TB) *tls.Config {
	certOnce.Do(func() {
		var err error
		if cert, err = certs.SelfSigned("localhost"); err != nil {
			t.Fatal(err)
		}
	})
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{alpn}}
}

// admission is what the server's ConnContext saw for one attempt.
type admission struct {
	addr     netip.Addr
	verified bool
	err      error
}

// testServer is a real quic-go server on loopback behind a Guard.
type testServer struct {
	g    *Guard
	sock *Socket
	addr *net.UDPAddr

	mu   sync.Mutex
	seen []admission
}

type serverOpts struct {
	listen string                       // default 127.0.0.1:0
	conn   func(*Socket) net.PacketConn // wraps the Socket for the Transport (spies)
	qconf  *quic.Config
	early  bool // ListenEarly, as the edge listens
}

func startServer(t *testing.T, cfg Config, o serverOpts) *testServer {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.listen == "" {
		o.listen = "127.0.0.1:0"
	}
	ua, err := net.ResolveUDPAddr("udp", o.listen)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		t.Skipf("listen %s: %v", o.listen, err)
	}
	s := &testServer{g: g, sock: g.WrapConn(udp), addr: udp.LocalAddr().(*net.UDPAddr)}
	var pc net.PacketConn = s.sock
	if o.conn != nil {
		pc = o.conn(s.sock)
	}
	tr := &quic.Transport{
		Conn:                pc,
		VerifySourceAddress: g.VerifySourceAddress,
		ConnContext: func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
			ctx, err := g.ConnContext(ctx, info)
			a, _ := addrOf(info.RemoteAddr)
			s.mu.Lock()
			s.seen = append(s.seen, admission{a, info.AddrVerified, err})
			s.mu.Unlock()
			return ctx, err
		},
	}
	qconf := o.qconf
	if qconf == nil {
		qconf = &quic.Config{HandshakeIdleTimeout: 500 * time.Millisecond}
	}
	var ln QUICListener
	if o.early {
		ln, err = tr.ListenEarly(serverTLS(t), qconf)
	} else {
		ln, err = tr.Listen(serverTLS(t), qconf)
	}
	if err != nil {
		t.Fatal(err)
	}
	gl := g.Listener(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := gl.Accept(ctx); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		<-done
		tr.Close()
		udp.Close()
	})
	return s
}

func (s *testServer) admissions(a netip.Addr) []admission {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []admission
	for _, ad := range s.seen {
		if ad.addr == a {
			out = append(out, ad)
		}
	}
	return out
}

// client is a quic.Transport bound to one loopback source address.
type client struct {
	tr   *quic.Transport
	spy  *countingConn
	addr netip.Addr
}

func newClient(t *testing.T, ip string) *client {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Skipf("bind %s: %v", ip, err)
	}
	spy := &countingConn{UDPConn: udp, pc: ipv4.NewPacketConn(udp)}
	tr := &quic.Transport{Conn: spy}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	return &client{tr: tr, spy: spy, addr: netip.MustParseAddr(ip)}
}

type dialOpts struct {
	handshake time.Duration // client HandshakeIdleTimeout; default 2s
	alpn      string        // default alpn
	ctx       context.Context
}

func (c *client) dial(t *testing.T, srv *net.UDPAddr, o dialOpts) (*quic.Conn, error) {
	t.Helper()
	if o.handshake == 0 {
		o.handshake = 2 * time.Second
	}
	if o.alpn == "" {
		o.alpn = alpn
	}
	if o.ctx == nil {
		o.ctx = context.Background()
	}
	conn, err := c.tr.Dial(o.ctx, srv,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{o.alpn}},
		&quic.Config{HandshakeIdleTimeout: o.handshake})
	if err == nil {
		t.Cleanup(func() { conn.CloseWithError(0, "") })
	}
	return conn, err
}

func (c *client) mustDial(t *testing.T, srv *net.UDPAddr) *quic.Conn {
	t.Helper()
	conn, err := c.dial(t, srv, dialOpts{})
	if err != nil {
		t.Fatalf("dial from %s: %v", c.addr, err)
	}
	return conn
}

// countingConn counts the datagrams a client receives; it keeps quic-go's batch path.
type countingConn struct {
	*net.UDPConn
	pc *ipv4.PacketConn
	n  atomic.Int64
}

func (c *countingConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	n, err := c.pc.ReadBatch(ms, flags)
	c.n.Add(int64(n))
	return n, err
}

func isRefused(err error) bool {
	var te *quic.TransportError
	return errors.As(err, &te) && te.ErrorCode == quic.ConnectionRefused && te.Remote
}

// banList is a Config.Banned backed by a set.
type banList struct {
	mu  sync.RWMutex
	set map[netip.Addr]bool
}

func (b *banList) banned(a netip.Addr) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.set[a]
}

func (b *banList) ban(a netip.Addr, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.set == nil {
		b.set = make(map[netip.Addr]bool)
	}
	b.set[a] = on
}
