package edge

import (
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/h2guard"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/metrics"
)

// Admission: the per-source transport budgets of the ip: section (DESIGN §1) — the
// accept filter of TCP connections (package admission), the per-IP connection budget
// and cap, and the stream budget of requests. QUIC's side of the same budgets is
// quicconn.Guard's, wired in Serve.

// connState gives a TCP connection's slot back when the HTTP server is done with it
// (closed, or hijacked: then its new owner is no longer an HTTP connection).
func (s *Server) connState(c net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	s.tcp.Release(h2guard.Raw(c))
}

// admitH3Stream charges a new HTTP/3 request stream from addr to the source's stream
// budget, as streamBudget charges an HTTP/1.1 or HTTP/2 request, but before quic-go
// reads the HEADERS frame: streams that never send one are bounded by the budget
// too. Over it, the stream is refused and the source charged toward a ban, unless it
// is a trusted proxy (whose clients' addresses are not known yet).
func (s *Server) admitH3Stream(addr netip.Addr) bool {
	now := time.Now()
	if s.box.Banned(addr) {
		s.metrics.RefusedStream(3, metrics.Banned)
		return false
	}
	if s.guard.AllowStream(addr, now) {
		return true
	}
	if !identity.Contains(s.rules.Load().Trusted, addr) {
		s.box.Reject(addr, now)
	}
	s.metrics.RefusedStream(3, metrics.Rate)
	return false
}

// chargeAbuse charges a source whose connection was ended for abuse (h2guard's
// Report) with charge rejections toward a ban (fewer when the ban comes first), and
// logs it (sampled).
func (s *Server) chargeAbuse(addr netip.Addr, charge int, reason string) {
	now := time.Now()
	banned := false
	for range charge {
		if banned = s.box.Reject(addr, now); banned {
			break
		}
	}
	if ok, suppressed := s.rejectLog.Allow(now); ok {
		s.log.Warn("connection closed for abuse", "source", addr.String(), "reason", reason,
			"charge", charge, "banned", banned, "suppressed", suppressed)
	}
}

// chargeSlow returns what charges a source charge rejections for a connection that
// ended without making progress (admission's slow.go: one; h2guard's write timeout:
// writeTimeoutCharge), unless it is a trusted proxy, whose connections carry many
// clients.
func (s *Server) chargeSlow(charge int) func(addr netip.Addr, reason string) {
	return func(addr netip.Addr, reason string) {
		if !identity.Contains(s.rules.Load().Trusted, addr) {
			s.chargeAbuse(addr, charge, reason)
		}
	}
}

// writeTimeoutCharge is what a write timeout charges (a response that took < 16 KiB in
// a whole write_timeout): at one, slow read's sources stayed under abuse.rejections and
// redialled a thousand at once; at ten, > 5 such connections in abuse.within ban one.
const writeTimeoutCharge = 10

// streamBudget refuses requests over their source's stream budget before anything
// else looks at them: HTTP/3 streams are reset with H3_REQUEST_REJECTED (no response
// is built), HTTP/1.1 and HTTP/2 get the prebuilt 429. No policy is evaluated.
func (s *Server) streamBudget(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		if s.shedding() {
			s.shed(w, r)
			return
		}
		if r.ProtoMajor < 3 {
			s.tcp.Served(r.Context()) // past the header phase: no longer pending
		}
		peer := identity.PeerAddr(r)
		// A banned source's connections are closed when the ban starts; a request
		// racing that, or one forwarded by a trusted proxy for a banned client, is
		// refused here without a policy or a computed field.
		client, trusted := peer, s.rules.Load().Trusted
		if len(trusted) > 0 {
			client = identity.ClientAddr(r, trusted)
		}
		banned := s.box.Banned(peer) || client != peer && s.box.Banned(client)
		// HTTP/3 streams were charged when package h3serve accepted them (admitH3Stream).
		if !banned && (r.ProtoMajor == 3 || s.guard.AllowStream(peer, now)) {
			if h, ok := s.share.Enter(client, s.inflight.Load(), s.maxInflight.Load()); ok {
				defer h.Leave()
				next(w, r, now)
			} else { // over its share of the in-flight cap: a hog, charged as one
				s.reject(r, now)
				s.shed(w, r)
			}
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
