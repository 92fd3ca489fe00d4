package bench

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// A client carries requests over one connection of the run, redialing when it is lost.
// Safe for concurrent use by the workers of that connection.
type client interface {
	roundTrip(req *http.Request) (*http.Response, error)
	close()
}

// Dial back-off after a failed dial, so a refusing server is not dialed in a hot loop.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// gate spaces out dials after failures: the first dial and any dial after a success go
// at once; each failure doubles the pause before the next, from 10 ms up to 1 s.
type gate struct {
	mu      sync.Mutex
	backoff time.Duration
	next    time.Time
}

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	d := time.Until(g.next)
	g.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// done records a dial's outcome; dials cut short by their own context do not count.
func (g *gate) done(ctx context.Context, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		g.backoff, g.next = 0, time.Time{}
		return
	}
	g.backoff = min(max(2*g.backoff, minBackoff), maxBackoff)
	g.next = time.Now().Add(g.backoff)
}

// httpClient is one HTTP/2 connection, or one HTTP/1.1 connection, through its own
// http.Transport: MaxConnsPerHost 1 keeps it to a single TCP connection, and for HTTP/2
// StrictMaxConcurrentRequests makes requests beyond the server's stream limit wait on
// that connection instead of opening another.
type httpClient struct {
	tr *http.Transport
}

func newHTTPClient(p Proto, tc *tls.Config, dst netip.AddrPort, src netip.Addr, timeout time.Duration) *httpClient {
	return &httpClient{tr: NewTransport(p, tc, dst, src, timeout)}
}

// NewTransport returns the transport of one of Run's HTTP/2 or HTTP/1.1 connections (p
// is H2 or H1): it dials dst from src (the zero Addr: the system picks) with a copy of
// tc and keeps at most one connection, spacing out dials after failures (10 ms doubling
// up to 1 s); timeout bounds each dial. It asks for no compression.
func NewTransport(p Proto, tc *tls.Config, dst netip.AddrPort, src netip.Addr, timeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if src.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	var g gate
	target := dst.String()
	protos := new(http.Protocols)
	if p == H2 {
		protos.SetHTTP2(true)
	} else {
		protos.SetHTTP1(true)
	}
	return &http.Transport{
		// Dial the address resolved once at the start, from this client's source.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
			c, err := d.DialContext(ctx, "tcp", target)
			g.done(ctx, err)
			return c, err
		},
		TLSClientConfig:     tc.Clone(),
		ForceAttemptHTTP2:   p == H2,
		Protocols:           protos,
		HTTP2:               &http.HTTP2Config{StrictMaxConcurrentRequests: true},
		MaxConnsPerHost:     1,
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // bytes are counted as sent; -H 'Accept-Encoding: gzip' to ask
	}
}

func (c *httpClient) roundTrip(req *http.Request) (*http.Response, error) {
	return c.tr.RoundTrip(req)
}

func (c *httpClient) close() { c.tr.CloseIdleConnections() }

// h3Client is one HTTP/3 connection dialed on a quic.Transport bound to its source
// address (shared with the other connections from that address). When the connection
// dies or stops taking requests (GOAWAY), the next request dials a new one.
type h3Client struct {
	tr      *quic.Transport
	addr    *net.UDPAddr
	tlsConf *tls.Config
	qconf   *quic.Config
	h3      *http3.Transport
	gate    gate

	mu      sync.Mutex
	qc      *quic.Conn
	cc      *http3.ClientConn
	dialing chan struct{} // closed when the dial in progress ends; nil if none
	dialErr error         // the last dial's error, for the requests that waited on it
	retired []*quic.Conn  // replaced but possibly still open (GOAWAY), closed at the end
}

func (c *h3Client) roundTrip(req *http.Request) (*http.Response, error) {
	qc, cc, err := c.conn(req.Context())
	if err != nil {
		return nil, err
	}
	resp, err := cc.RoundTrip(req)
	if err != nil && req.Context().Err() == nil && (qc.Context().Err() != nil || connUnusable(err)) {
		c.retire(qc)
	}
	return resp, err
}

// connUnusable spots http3's unexported errConnUnusable (a GOAWAY or a failure to open a
// stream): the connection takes no new requests even though it is not closed yet.
func connUnusable(err error) bool {
	return strings.HasPrefix(err.Error(), "http3: conn unusable")
}

// conn returns the live connection, dialing one if needed; concurrent callers share a
// single dial.
func (c *h3Client) conn(ctx context.Context) (*quic.Conn, *http3.ClientConn, error) {
	for {
		c.mu.Lock()
		if c.qc != nil {
			if c.qc.Context().Err() == nil {
				qc, cc := c.qc, c.cc
				c.mu.Unlock()
				return qc, cc, nil
			}
			c.qc, c.cc = nil, nil
		}
		if ch := c.dialing; ch != nil {
			c.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, nil, context.Cause(ctx)
			}
			c.mu.Lock()
			err := c.dialErr
			c.mu.Unlock()
			if err == nil {
				// The dial succeeded; its connection may already have been retired
				// (closed, GOAWAY) by another worker, in which case the loop dials again.
				continue
			}
			return nil, nil, err
		}
		ch := make(chan struct{})
		c.dialing = ch
		c.mu.Unlock()

		qc, err := c.dial(ctx)

		c.mu.Lock()
		c.dialing, c.dialErr = nil, err
		if err == nil {
			c.qc, c.cc = qc, c.h3.NewClientConn(qc)
		}
		close(ch)
		c.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
	}
}

func (c *h3Client) dial(ctx context.Context) (*quic.Conn, error) {
	if err := c.gate.wait(ctx); err != nil {
		return nil, err
	}
	qc, err := c.tr.Dial(ctx, c.addr, c.tlsConf, c.qconf)
	c.gate.done(ctx, err)
	return qc, err
}

func (c *h3Client) retire(qc *quic.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.qc != qc {
		return // already replaced by another worker
	}
	c.qc, c.cc = nil, nil
	c.retired = pruneClosed(c.retired)
	if qc.Context().Err() == nil {
		c.retired = append(c.retired, qc)
	}
}

func pruneClosed(conns []*quic.Conn) []*quic.Conn {
	live := conns[:0]
	for _, qc := range conns {
		if qc.Context().Err() == nil {
			live = append(live, qc)
		}
	}
	clear(conns[len(live):])
	return live
}

func (c *h3Client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.qc != nil {
		c.retired = append(c.retired, c.qc)
		c.qc, c.cc = nil, nil
	}
	for _, qc := range c.retired {
		_ = qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}
	c.retired = nil
}
