package edge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/quicconn"
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
		b.Run(proto+"/edge-3policies", func(b *testing.B) {
			e := startEdge(b, withPolicies(benchPolicies...))
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
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "off"
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

// benchPolicies are three local policies that never deny, so every request pays for
// the whole decision and its fields.
var benchPolicies = []config.Policy{
	{Name: "burst", Key: []string{"header:X-API-Key", "ip"}, Quota: 1 << 40, Window: time.Second},
	{Name: "daily", Key: []string{"header:X-API-Key", "ip"}, Algorithm: "fixed_window", Quota: 1 << 40, Window: 24 * time.Hour},
	{Name: "per-ip", Key: []string{"ip"}, Algorithm: "sliding_window", Quota: 1 << 40, Window: time.Minute},
}

// BenchmarkChain measures the middleware alone — everything a request passes through
// before the origin — with no policies and with three local policies:
//
//	go test ./edge -run '^$' -bench Chain -benchmem -cpu 1,2
func BenchmarkChain(b *testing.B) {
	for _, tt := range []struct {
		name     string
		policies []config.Policy
	}{{"none", nil}, {"three", benchPolicies}} {
		b.Run(tt.name, func(b *testing.B) {
			cfg := config.Default()
			cfg.Listen = "127.0.0.1:0"
			cfg.IP = roomyIP
			cfg.Policies = tt.policies
			benchChain(b, cfg, func() *http.Request {
				// A request of a connection, as the listeners make them.
				r := httptest.NewRequestWithContext(identity.WithMemo(context.Background()), "GET", "https://api.example/v1/items", nil)
				r.RemoteAddr = "192.0.2.7:40000"
				r.Header.Set("X-API-Key", "k-000042")
				return r
			})
		})
	}
}

// benchChain builds the server of cfg — its own chain (its instrument, its registry)
// with unlimited per-source budgets (the benchmark is one source), in front of an
// origin that costs nothing — and serves it, in parallel, the requests newRequest
// makes (one per goroutine, as a connection's), failing on any status but 200.
func benchChain(b *testing.B, cfg *config.Config, newRequest func() *http.Request) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	s, err := New(cfg, Options{CertCacheDir: certCache(b), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.guard.SetLimits(quicconn.Config{ConnRate: -1, StreamRate: -1, MaxConnections: -1,
		MaxTracked: cfg.IP.MaxTracked}); err != nil {
		b.Fatal(err)
	}
	var origin http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	s.origin.Store(&origin)
	h := s.handler
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := newRequest()
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, r)
			if w.code != 200 {
				b.Fatalf("status %d", w.code)
			}
		}
	})
}

type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkGrowStack: a new goroutine that grows its stack with growStack, then runs a
// path about 12 KiB deep, as a request goroutine does; "again" is the call on a stack
// that has the room already (the chain's second call on HTTP/3).
func BenchmarkGrowStack(b *testing.B) {
	b.Run("goroutine", func(b *testing.B) {
		done := make(chan int)
		for range b.N {
			go func() { growStack(); done <- deepStack(100) }()
			<-done
		}
	})
	b.Run("again", func(b *testing.B) {
		for range b.N {
			growStack()
		}
	})
}

// deepStack uses about 100 bytes of stack per level.
//
//go:noinline
func deepStack(d int) int {
	var x [64]byte
	x[d%64] = byte(d)
	if d == 0 {
		return int(x[0])
	}
	return deepStack(d-1) + int(x[d%64])
}
