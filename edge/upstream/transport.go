package upstream

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// Transport carries the requests of one target. *http.Transport is one; a leaner
// client can take its place through Config.NewTransport, leaving balancing, health and
// retries as they are.
type Transport interface {
	http.RoundTripper
	// CloseIdleConnections closes the connections not carrying a request now.
	CloseIdleConnections()
}

// dialTimeout bounds a TCP connect to a target: a dead host fails the try quickly, so
// that it can be retried elsewhere.
const dialTimeout = 2 * time.Second

// DefaultTransport is the transport of t: to http:// targets HTTP/1.1 with keep-alive
// on the calling goroutine (see h1Client; requests it cannot carry that way go through
// NetHTTPTransport's), to https:// and h2c:// targets NetHTTPTransport. At most
// cfg.MaxConnections connections are open to t.
func DefaultTransport(t Target, cfg *Config) Transport {
	tr := NetHTTPTransport(t, cfg).(*http.Transport)
	if t.URL.Scheme == "http" {
		return newH1Client(t, cfg, tr)
	}
	return tr
}

// NetHTTPTransport is a net/http Transport for t: HTTP/1.1 with keep-alive to http://
// targets, HTTP/2 or HTTP/1.1 (by ALPN) to https:// ones, verified against
// cfg.RootCAs or the system roots, and HTTP/2 without TLS (prior knowledge) to h2c://
// ones. At most cfg.MaxConnections connections are open to t. It asks for no
// compression: a proxy passes the client's Accept-Encoding on, and the origin's
// encoding back, rather than have net/http add gzip and decompress at the edge.
func NetHTTPTransport(t Target, cfg *Config) Transport {
	tr := &http.Transport{
		Proxy:                 nil, // the edge talks to its targets directly
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		MaxConnsPerHost:       cfg.MaxConnections,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	if cfg.MaxConnections > 0 {
		tr.MaxIdleConnsPerHost = min(tr.MaxIdleConnsPerHost, cfg.MaxConnections)
	}
	switch t.URL.Scheme {
	case "https":
		tr.TLSClientConfig = &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12}
		tr.ForceAttemptHTTP2 = true
	case "h2c":
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	return tr
}
