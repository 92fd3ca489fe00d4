package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/enforce"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/route"
	"github.com/h3edge/h3edge/edge/slowbody"
	"github.com/h3edge/h3edge/edge/upstream"
)

// buildOrigin returns the handler behind the middleware: the routes and their pools
// (routing.go) when upstream or upstreams is configured, or the demo origin. prev is
// the routing in force (nil at start): pools whose settings did not change carry
// over, with their connections and health.
func (s *Server) buildOrigin(cfg *config.Config, prev *routing) (http.Handler, *routing, error) {
	if cfg.Upstream == "" && len(cfg.Upstreams) == 0 {
		return demoOrigin(cfg.TrustedProxyPrefixes()), nil, nil
	}
	rt, err := s.newRouting(cfg, prev)
	if err != nil {
		return nil, nil, err
	}
	return rt, rt, nil
}

// forwarded returns the Rewrite step that rebuilds the forwarded fields from the real
// peer: X-Forwarded-For keeps an incoming chain only when the peer is a trusted proxy,
// of the prefixes trusted returns (those in force: a reload that changes them leaves
// the pools as they are), and only such a peer's other address fields (X-Real-IP and
// the rest the pool drops: upstream.ClientAddrField) reach the origin.
func forwarded(trusted func() []netip.Prefix) func(out, in *http.Request) {
	return func(out, in *http.Request) {
		pa := identity.PeerAddr(in)
		peer := pa.String()
		xff := peer
		if ts := trusted(); len(ts) > 0 && identity.Contains(ts, pa) {
			if prior := in.Header["X-Forwarded-For"]; len(prior) > 0 {
				xff = joinComma(prior) + ", " + peer
			}
			for k, vv := range in.Header { // the three set below replace theirs
				if k != "Forwarded" && upstream.ClientAddrField(k) {
					out.Header[k] = vv[:len(vv):len(vv)]
				}
			}
		}
		vs := []string{xff, in.Host} // one allocation; full slices, so an append copies
		out.Header["X-Forwarded-For"] = vs[0:1:1]
		out.Header["X-Forwarded-Host"] = vs[1:2:2]
		out.Header["X-Forwarded-Proto"] = httpsValue
		// Via names the protocol the client spoke (RFC 9110 §7.6.3).
		if prior := out.Header["Via"]; len(prior) > 0 {
			out.Header["Via"] = append(prior, viaValue(in)[0])
		} else {
			out.Header["Via"] = viaValue(in)
		}
	}
}

// Field values every request shares (nothing changes them in place; an append copies).
var (
	httpsValue       = []string{"https"}
	via1, via2, via3 = []string{"1.1 h3edge"}, []string{"2 h3edge"}, []string{"3 h3edge"}
)

// proxyError maps a failed upstream exchange to 504 (timeout) or 502 (anything else),
// and logs why (sampled: a dead upstream fails every request). A client that went away
// gets nothing: there is nobody to answer. A route's max_duration that passed before
// the upstream answered is 504, as the upstream's own timeout is. A body that body_read_timeout ended gets
// 408 first: on HTTP/1.1 the read deadline that ended it also ends the request's
// context, yet the client is there to read the answer.
func proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if slowbody.TimedOut(r) {
		writeBodyTimeout(w, r)
		return
	}
	if err := r.Context().Err(); err != nil {
		if err == context.DeadlineExceeded { // the route's max_duration, before any answer
			answer.Problem(w, r, http.StatusGatewayTimeout, "Gateway Timeout", "the upstream did not answer within the route's max_duration")
		}
		return
	}
	if enforce.BodyCutOff(r) {
		enforce.AnswerBodyCutOff(w, r)
		return
	}
	if m := route.BodyTooLarge(r); m != nil {
		writeBodyTooLarge(w, r, m)
		return
	}
	var nh *upstream.NoHealthyError
	if errors.As(err, &nh) {
		writeNoHealthy(w, r, nh)
		return
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		answer.Problem(w, r, http.StatusGatewayTimeout, "Gateway Timeout", "the upstream did not answer in time")
		serverOf(r).logUpstreamError(r, http.StatusGatewayTimeout, err)
		return
	}
	answer.Problem(w, r, http.StatusBadGateway, "Bad Gateway", "the upstream could not be reached")
	serverOf(r).logUpstreamError(r, http.StatusBadGateway, err)
}

// serverKey is the context key of the Server a connection came to.
type serverKey struct{}

// connContext is the context of a new connection to s, on every protocol: its memo
// (identity.Memo) and s itself, for what runs outside the server's reach, such as the
// proxy's error handler (buildOrigin makes it from the configuration alone).
func (s *Server) connContext(ctx context.Context) context.Context {
	return context.WithValue(identity.WithMemo(ctx), serverKey{}, s)
}

// serverOf returns the Server r came to, or nil (a handler driven directly by a test).
func serverOf(r *http.Request) *Server {
	s, _ := r.Context().Value(serverKey{}).(*Server)
	return s
}

// logUpstreamError logs a failed upstream exchange answered with status, at most a few
// lines a second. A failed TLS verification names its reason ("x509: certificate
// signed by unknown authority"), the cause an operator otherwise has no way to see.
func (s *Server) logUpstreamError(r *http.Request, status int, err error) {
	if s == nil {
		return
	}
	ok, suppressed := s.upstreamLog.Allow(time.Now())
	if !ok {
		return
	}
	reason := err.Error()
	var cve *tls.CertificateVerificationError
	if errors.As(err, &cve) && cve.Err != nil {
		reason = cve.Err.Error()
	}
	s.log.Warn("upstream exchange failed", "status", status, "method", r.Method, "path", r.URL.Path,
		"reason", reason, "error", err, "suppressed", suppressed)
}

func joinComma(vs []string) string {
	if len(vs) == 1 {
		return vs[0]
	}
	out := vs[0]
	for _, v := range vs[1:] {
		out += ", " + v
	}
	return out
}

func viaValue(r *http.Request) []string {
	switch r.ProtoMajor {
	case 3:
		return via3
	case 2:
		return via2
	}
	return via1
}

// trustedPrefixes are the trusted proxies in force (the pools' forwarded step).
func (s *Server) trustedPrefixes() []netip.Prefix { return s.rules.Load().Trusted }
