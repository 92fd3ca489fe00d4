package scenario

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/certs"
	"github.com/h3edge/h3edge/edge/demo"
)

// The bare server's settings mirror h3edge's public listeners (streams per connection,
// header limits, timeouts), so that the comparison measures what h3edge adds, not a
// different tuning.
const (
	bareStreams        = 100
	bareIdleTimeout    = 120 * time.Second
	bareHeaderTimeout  = 10 * time.Second
	bareMaxHeaderBytes = 64 << 10
)

// UseEdgeGC sets this process's garbage collector as h3edge sets its own
// (cmd/h3edge/gc.go: GOGC=400 unless the environment sets GOGC). A process that serves
// the bare baseline calls it, so that the baseline compares the servers, not two
// collector settings.
func UseEdgeGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// ServeBare runs the baseline server the scenarios compare h3edge with: quic-go's
// http3.Server on its own quic.Transport (UDP) and net/http over TLS (HTTP/2 and
// HTTP/1.1, TCP) on the same address, with a self-signed ECDSA P-256 certificate made at
// start (as h3edge's development certificate is), and nothing in front of the handler.
// The handler is h3edge's demo origin itself (package demo), with nothing around it:
// the echo reports the peer's address as client_addr and a bad query parameter gets a
// plain-text 400.
//
// Once both sockets are bound it writes one line to logw, "bare serving listen=ADDR
// spki_pin=PIN", and serves until ctx ends; then it closes everything and returns nil.
func ServeBare(ctx context.Context, addr string, logw io.Writer) error {
	cert, pin, err := bareCertificate()
	if err != nil {
		return err
	}
	tcpLn, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bench: bare server: %w", err)
	}
	defer tcpLn.Close()
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(tcpLn.Addr().(*net.TCPAddr).AddrPort()))
	if err != nil {
		return fmt.Errorf("bench: bare server: %w", err)
	}
	defer udp.Close()
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	qconf := &quic.Config{Allow0RTT: true, MaxIdleTimeout: bareIdleTimeout, MaxIncomingStreams: bareStreams}
	ln, err := tr.ListenEarly(http3.ConfigureTLSConfig(tc.Clone()), qconf)
	if err != nil {
		return fmt.Errorf("bench: bare server: %w", err)
	}
	h := demo.New(demo.Config{})
	h3 := &http3.Server{Handler: h, QUICConfig: qconf, MaxHeaderBytes: bareMaxHeaderBytes, IdleTimeout: bareIdleTimeout}
	tc12 := tc.Clone()
	tc12.NextProtos = []string{"h2", "http/1.1"}
	h12 := &http.Server{
		Handler:           h,
		TLSConfig:         tc12,
		ReadHeaderTimeout: bareHeaderTimeout,
		IdleTimeout:       bareIdleTimeout,
		MaxHeaderBytes:    bareMaxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: bareStreams, MaxReadFrameSize: 16384},
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Go(func() { errc <- h3.ServeListener(ln) })
	wg.Go(func() { errc <- h12.Serve(tls.NewListener(tcpLn, tc12)) })
	fmt.Fprintf(logw, "bare serving listen=%s spki_pin=%s\n", tcpLn.Addr(), pin)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	h3.Close()
	h12.Close()
	ln.Close()
	wg.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, quic.ErrServerClosed) {
		return fmt.Errorf("bench: bare server: %w", err)
	}
	return nil
}

// bareCertificate makes a self-signed certificate for 127.0.0.1, ::1 and localhost and
// returns it with its SPKI pin.
func bareCertificate() (tls.Certificate, string, error) {
	c, err := certs.SelfSigned()
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("bench: bare server: %w", err)
	}
	return c, bench.SPKIPin(c.Leaf), nil
}
