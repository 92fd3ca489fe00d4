package edge

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/edge/admission"
	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/metrics"
	"github.com/h3edge/h3edge/quicconn"
)

// Admission: the per-source transport budgets of the ip: section (DESIGN §1) — the
// accept filter of TCP connections (package admission), the per-IP connection budget
// and cap, and the stream budget of requests. QUIC's side of the same budgets is
// quicconn.Guard's, wired in Serve.

// newGuard builds the per-source transport budgets of the ip: section.
func newGuard(c config.IPConfig, banned func(netip.Addr) bool) (*quicconn.Guard, error) {
	gc := admission.GuardConfig(c)
	gc.Banned = banned
	return quicconn.New(gc)
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
	s.tcp.Release(c)
}

// streamBudget refuses requests over their source's stream budget before anything
// else looks at them: HTTP/3 streams are reset with H3_REQUEST_REJECTED (no response
// is built), HTTP/1.1 and HTTP/2 get the prebuilt 429. No policy is evaluated.
func (s *Server) streamBudget(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		peer := identity.PeerAddr(r)
		// A banned source's connections are closed when the ban starts; a request
		// racing that, or one forwarded by a trusted proxy for a banned client, is
		// refused here without a policy or a computed field.
		trusted := s.rules.Load().Trusted
		banned := s.box.Banned(peer) || len(trusted) > 0 && s.box.Banned(identity.ClientAddr(r, trusted))
		if !banned && s.guard.AllowStream(peer, now) {
			next(w, r, now)
			return
		}
		if !banned {
			s.reject(r, now)
		}
		s.metrics.RefusedStream(r.ProtoMajor, metrics.Rate)
		metrics.MarkRefused(w)
		if st, ok := w.(http3.HTTPStreamer); ok {
			if str, err := st.HTTPStream(); err == nil {
				str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				return
			}
		}
		answer.TooManyStreams(w, r)
	}
}
