package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/certs"
)

// Bare in-process servers for the tests: quic-go's http3.Server on its own
// quic.Transport, and net/http's TLS server (HTTP/2 and HTTP/1.1), both on loopback with
// a self-signed certificate made here.

var discardLog = log.New(io.Discard, "", 0)

var (
	certOnce sync.Once
	testCert tls.Certificate
	testLeaf *x509.Certificate
)

// selfSigned returns a self-signed certificate for 127.0.0.1, ::1 and localhost.
func selfSigned(t testing.TB) (tls.Certificate, *x509.Certificate) {
	t.Helper()
	certOnce.Do(func() {
		var err error
		if testCert, err = certs.SelfSigned(); err != nil {
			panic(err)
		}
		testLeaf = testCert.Leaf
	})
	return testCert, testLeaf
}

func testPin(t testing.TB) string {
	_, leaf := selfSigned(t)
	return SPKIPin(leaf)
}

// recorder is a handler that notes what the server saw.
type recorder struct {
	body []byte
	// delay, if set, holds each response this long (or until the request ends).
	delay time.Duration
	// quiet skips the bookkeeping, for throughput figures.
	quiet bool
	// after, if set, is called with each request's number (from 1), outside the lock.
	after func(n int)

	mu      sync.Mutex
	count   int
	remotes map[string]int // ip:port
	ips     map[string]int
	protos  map[string]int
	keys    map[string]int
	hosts   map[string]int
	times   []time.Time
	conns   int // connections opened, counted by the server
	qconns  []*quic.Conn
}

func newRecorder() *recorder {
	return &recorder{
		body:    []byte("ok"),
		remotes: map[string]int{},
		ips:     map[string]int{},
		protos:  map[string]int{},
		keys:    map[string]int{},
		hosts:   map[string]int{},
	}
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rec.quiet {
		w.Write(rec.body)
		return
	}
	now := time.Now()
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	rec.mu.Lock()
	rec.count++
	rec.remotes[r.RemoteAddr]++
	rec.ips[host]++
	rec.protos[r.Proto]++
	rec.hosts[r.Host]++
	if k := r.Header.Get("X-API-Key"); k != "" {
		rec.keys[k]++
	}
	rec.times = append(rec.times, now)
	n := rec.count
	rec.mu.Unlock()
	if rec.after != nil {
		rec.after(n)
	}
	if rec.delay > 0 {
		select {
		case <-time.After(rec.delay):
		case <-r.Context().Done():
			return
		}
	}
	w.Write(rec.body)
}

func (rec *recorder) newConn() {
	rec.mu.Lock()
	rec.conns++
	rec.mu.Unlock()
}

func (rec *recorder) snapshot() recorder {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return recorder{
		count: rec.count, conns: rec.conns, remotes: clone(rec.remotes), ips: clone(rec.ips),
		protos: clone(rec.protos), keys: clone(rec.keys), hosts: clone(rec.hosts), times: append([]time.Time(nil), rec.times...),
	}
}

func clone(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// startH3 serves rec over HTTP/3 on 127.0.0.1 and returns the https URL. If refuse is
// set, every connection is refused (CONNECTION_REFUSED) before the handshake.
func startH3(t *testing.T, rec *recorder, refuse bool) string {
	t.Helper()
	cert, _ := selfSigned(t)
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: uc}
	if refuse {
		tr.ConnContext = func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
			return ctx, errors.New("refused by test")
		}
	}
	tc := http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}})
	ln, err := tr.ListenEarly(tc, &quic.Config{Allow0RTT: true, MaxIncomingStreams: 1000})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{
		Handler:   rec,
		TLSConfig: tc,
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			rec.newConn()
			rec.mu.Lock()
			rec.qconns = append(rec.qconns, c)
			rec.mu.Unlock()
			return ctx
		},
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.ServeListener(ln) }()
	t.Cleanup(func() {
		srv.Close()
		ln.Close()
		<-done
		tr.Close()
		uc.Close()
	})
	return "https://" + uc.LocalAddr().String() + "/"
}

// startTLS serves rec over HTTP/2 and HTTP/1.1 with TLS on 127.0.0.1 and returns the
// https URL.
func startTLS(t *testing.T, rec *recorder) string {
	t.Helper()
	cert, _ := selfSigned(t)
	srv := httptest.NewUnstartedServer(rec)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rec.newConn()
		}
	}
	srv.Config.ErrorLog = discardLog
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// start serves rec for proto p.
func start(t *testing.T, p Proto, rec *recorder) string {
	if p == H3 {
		return startH3(t, rec, false)
	}
	return startTLS(t, rec)
}
