package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"time"
)

// origin is the handler behind the middleware: the proxy to the upstream, or the demo
// origin when none is configured.
func buildOrigin(cfg *Config) (http.Handler, error) {
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

// proxyError maps a failed upstream exchange to 504 (timeout) or 502 (anything else). A
// client that went away gets nothing: there is nobody to answer.
func proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	if bodyQuotaExceeded(r) {
		writeBodyQuota(w, r)
		return
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		writeProblem(w, http.StatusGatewayTimeout, "Gateway Timeout", "the upstream did not answer in time")
		return
	}
	writeProblem(w, http.StatusBadGateway, "Bad Gateway", "the upstream could not be reached")
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
