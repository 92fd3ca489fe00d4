package edge

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/quicconn"
)

// newGuard builds the per-source transport budgets of the ip: section.
func newGuard(c IPConfig, banned func(netip.Addr) bool) (*quicconn.Guard, error) {
	gc := guardConfig(c)
	gc.Banned = banned
	return quicconn.New(gc)
}

// guardConfig translates the ip: section.
func guardConfig(c IPConfig) quicconn.Config {
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
	g *quicconn.Guard
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
		slot, err := l.g.Admit(ap.Addr().Unmap(), time.Now())
		if err != nil {
			// SO_LINGER 0: a RST, no FIN handshake to wait for.
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		return &slotConn{Conn: c, slot: slot}, nil
	}
}

// slotConn gives its source's connection slot back when closed.
type slotConn struct {
	net.Conn
	slot *quicconn.Slot
	once sync.Once
}

func (c *slotConn) Close() error {
	c.once.Do(c.slot.Release)
	return c.Conn.Close()
}

// tooManyStreams is the prebuilt answer to an HTTP/1.1 or HTTP/2 request over its
// source's stream budget: nothing in it is computed per request.
var tooManyStreams = []byte(`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests from this source"}`)

// streamBudget refuses requests over their source's stream budget before anything
// else looks at them: HTTP/3 streams are reset with H3_REQUEST_REJECTED (no response
// is built), HTTP/1.1 and HTTP/2 get the prebuilt 429. No policy is evaluated.
func (s *Server) streamBudget(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.guard.AllowStream(peerAddr(r), time.Now()) {
			next.ServeHTTP(w, r)
			return
		}
		if st, ok := w.(http3.HTTPStreamer); ok {
			if str, err := st.HTTPStream(); err == nil {
				str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				return
			}
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/problem+json"}
		h["Retry-After"] = []string{"1"}
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(tooManyStreams)
	})
}
