package edge

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// BenchmarkThroughput compares small GETs through h3edge (demo origin) with a bare
// quic-go http3.Server / net/http server running the same handler, per protocol. Client
// and server share the process, so absolute figures understate both; compare the pairs:
//
//	go test ./edge -run '^$' -bench Throughput -benchmem -count 6 -cpu 2
func BenchmarkThroughput(b *testing.B) {
	for _, proto := range []string{"h3", "h2", "h1"} {
		b.Run(proto+"/bare", func(b *testing.B) {
			url := startBare(b)
			drive(b, clientFor(b, proto), url+"/")
		})
		b.Run(proto+"/edge", func(b *testing.B) {
			e := startEdge(b, nil)
			drive(b, clientFor(b, proto), e.url+"/")
		})
	}
}

// drive sends b.N GETs from 32 goroutines.
func drive(b *testing.B, c *http.Client, url string) {
	b.Helper()
	if resp, err := c.Get(url); err != nil {
		b.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

// startBare serves the demo origin with nothing in front: quic-go's http3.Server on UDP
// and net/http over TLS on TCP, same port, same certificate.
func startBare(b *testing.B) string {
	b.Helper()
	cfg := Default()
	cfg.Listen = "127.0.0.1:0"
	s, err := New(cfg, Options{CertCacheDir: certCache(b), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		b.Fatal(err)
	}
	h := demoOrigin(nil)
	h3 := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(s.Certs().ServerConfig()),
		QUICConfig: &quic.Config{Allow0RTT: true}}
	h12 := &http.Server{Handler: h, TLSConfig: s.Certs().ServerConfig("h2", "http/1.1")}
	go h3.Serve(s.udpConn)
	go func() {
		if err := h12.ServeTLS(s.tcpLn, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.Error(err)
		}
	}()
	b.Cleanup(func() { h3.Close(); h12.Close(); s.udpConn.Close() })
	return "https://" + net.JoinHostPort("127.0.0.1", itoa(s.Addr().Port))
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}
