package edge

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/quicconn"
)

// Admission: the per-source transport budgets of the ip: section (DESIGN §1) — the
// accept filter of TCP connections, the per-IP connection budget and cap, and the
// stream budget of HTTP/1.1 and HTTP/2 requests. QUIC's side of the same budgets is
// quicconn.Guard's, wired in Serve.

// newGuard builds the per-source transport budgets of the ip: section.
func newGuard(c config.IPConfig, banned func(netip.Addr) bool) (*quicconn.Guard, error) {
	gc := guardConfig(c)
	gc.Banned = banned
	return quicconn.New(gc)
}

// guardConfig translates the ip: section.
func guardConfig(c config.IPConfig) quicconn.Config {
	return quicconn.Config{
		ConnRate:       c.Connections.Rate,
		ConnBurst:      c.Connections.Burst,
		StreamRate:     c.Streams.Rate,
		StreamBurst:    c.Streams.Burst,
		MaxConnections: c.MaxConnections,
		RetryAbove:     float64(c.RetryAbove),
		MaxTracked:     c.MaxTracked,
		IPv4Prefix:     c.IPv4Prefix,
		IPv6Prefix:     c.IPv6Prefix,
	}
}

// guardedListener closes TCP connections over their source's budget at accept, before
// any TLS work, and counts open ones against the source's cap.
type guardedListener struct {
	net.Listener
	s *Server
}

func (l guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
		if err != nil {
			return c, nil
		}
		addr := ap.Addr().Unmap()
		if l.s.banned(addr) {
			l.s.refusedTCP.banned.Add(1)
			reset(c)
			continue
		}
		slot, err := l.s.guard.Admit(addr, time.Now())
		if err != nil {
			if err == quicconn.ErrMaxConns {
				l.s.refusedTCP.maxConns.Add(1)
			} else {
				l.s.refusedTCP.rate.Add(1)
			}
			reset(c)
			continue
		}
		// The connection itself goes to the server, unwrapped: a wrapper's extra frame
		// on every write pushed HTTP/2's frame-writing goroutines past their initial
		// stack (a stack copy per flush). Its slot is found again by the conn when
		// the server reports it closed (connState).
		l.s.tcpConns.Store(c, &tcpSlot{slot: slot, addr: addr})
		return c, nil
	}
}

// tcpSlot is an open TCP connection's place in its source's count.
type tcpSlot struct {
	slot *quicconn.Slot
	addr netip.Addr
}

// connState gives a TCP connection's slot back when the HTTP server is done with it
// (closed, or hijacked: then its new owner is no longer an HTTP connection).
func (s *Server) connState(c net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	if g, ok := c.(*h2HeaderGuard); ok {
		c = g.Conn
	}
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if v, ok := s.tcpConns.LoadAndDelete(c); ok {
		v.(*tcpSlot).slot.Release()
	}
}

// reset closes c with a RST (SO_LINGER 0): no FIN handshake to wait for.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// refusedTCP counts TCP connections closed at accept, by reason.
type refusedTCP struct {
	banned, rate, maxConns atomic.Uint64
}

// kickTCP closes the open TCP connections of sources in p (a new ban) and returns how
// many it closed. Bans are rare; the walk is over open connections only.
func (s *Server) kickTCP(p netip.Prefix) int {
	n := 0
	s.tcpConns.Range(func(k, v any) bool {
		if p.Contains(v.(*tcpSlot).addr) {
			reset(k.(net.Conn)) // the server then reports it closed: connState releases it
			n++
		}
		return true
	})
	return n
}

// streamBudget refuses requests over their source's stream budget before anything
// else looks at them: HTTP/3 streams are reset with H3_REQUEST_REJECTED (no response
// is built), HTTP/1.1 and HTTP/2 get the prebuilt 429. No policy is evaluated.
func (s *Server) streamBudget(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := requestTime(w)
		peer := identity.PeerAddr(r)
		// A banned source's connections are closed when the ban starts; a request
		// racing that, or one forwarded by a trusted proxy for a banned client, is
		// refused here without a policy or a computed field.
		trusted := s.rules.Load().Trusted
		banned := s.box.Banned(peer) || len(trusted) > 0 && s.box.Banned(identity.ClientAddr(r, trusted))
		if !banned && s.guard.AllowStream(peer, now) {
			next.ServeHTTP(w, r)
			return
		}
		if !banned {
			s.reject(r, now)
		}
		s.metrics.refusedStream(r.ProtoMajor, reasonRate)
		markRefused(w)
		if st, ok := w.(http3.HTTPStreamer); ok {
			if str, err := st.HTTPStream(); err == nil {
				str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				return
			}
		}
		answer.TooManyStreams(w, r)
	})
}
