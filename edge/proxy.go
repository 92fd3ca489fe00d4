package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// origin is the handler behind the middleware: the proxy to the upstream, or the demo
// origin when none is configured.
func buildOrigin(cfg *config.Config) (http.Handler, error) {
	if cfg.Upstream == "" {
		return demoOrigin(cfg.TrustedProxyPrefixes()), nil
	}
	u, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("edge: upstream: %w", err)
	}
	return newProxy(u, cfg.TrustedProxyPrefixes(), cfg.UpstreamTimeout), nil
}

// newProxy returns a reverse proxy to target. Forwarded fields are rebuilt from the real
// peer: X-Forwarded-For keeps an incoming chain only when the peer is a trusted proxy.
// Responses stream: server-sent events and other bodies of unknown length are flushed
// as they arrive.
func newProxy(target *url.URL, trusted []netip.Prefix, timeout time.Duration) *httputil.ReverseProxy {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 256
	tr.ResponseHeaderTimeout = timeout
	tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			peer := peerAddr(pr.In).String()
			xff := peer
			if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 && contains(trusted, peerAddr(pr.In)) {
				xff = joinComma(prior) + ", " + peer
			}
			pr.Out.Header["X-Forwarded-For"] = []string{xff}
			pr.Out.Header["X-Forwarded-Host"] = []string{pr.In.Host}
			pr.Out.Header["X-Forwarded-Proto"] = []string{"https"}
			// Via names the protocol the client spoke (RFC 9110 §7.6.3).
			pr.Out.Header["Via"] = append(pr.Out.Header["Via"], viaValue(pr.In))
		},
		ErrorHandler: proxyError,
	}
}

// proxyError maps a failed upstream exchange to 504 (timeout) or 502 (anything else),
// and logs why (sampled: a dead upstream fails every request). A client that went away
// gets nothing: there is nobody to answer.
func proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	if bodyQuotaExceeded(r) {
		writeBodyQuota(w, r)
		return
	}
	if bodyTimedOut(r) {
		writeBodyTimeout(w, r)
		return
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		writeProblem(w, http.StatusGatewayTimeout, "Gateway Timeout", "the upstream did not answer in time")
		serverOf(r).logUpstreamError(r, http.StatusGatewayTimeout, err)
		return
	}
	writeProblem(w, http.StatusBadGateway, "Bad Gateway", "the upstream could not be reached")
	serverOf(r).logUpstreamError(r, http.StatusBadGateway, err)
}

// serverKey is the context key of the Server a connection came to.
type serverKey struct{}

// connContext is the context of a new connection to s, on every protocol: its memo
// (connMemo) and s itself, for what runs outside the server's reach, such as the
// proxy's error handler (buildOrigin makes it from the configuration alone).
func (s *Server) connContext(ctx context.Context) context.Context {
	return context.WithValue(withConnMemo(ctx), serverKey{}, s)
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
	ok, suppressed := s.upstreamLog.allow(time.Now())
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

func viaValue(r *http.Request) string {
	switch r.ProtoMajor {
	case 3:
		return "3 h3edge"
	case 2:
		return "2 h3edge"
	}
	return "1.1 h3edge"
}
