package upstream

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// cannedOrigin is an HTTP/1.1 origin on loopback that answers every request with the
// same 2-byte response from a fixed buffer: it allocates nothing per request, so that
// BenchmarkProxyLeg's allocations are the proxy leg's own. Requests must have no body.
func cannedOrigin(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					// The head ends at the first empty line.
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(bytes.TrimRight(line, "\r\n")) == 0 {
							break
						}
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// discardWriter is the client side of BenchmarkProxyLeg: a ResponseWriter that keeps
// its header map across requests and throws the body away.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) Flush()                      {}

// BenchmarkProxyLeg measures one proxied GET through a Pool (the proxy loop,
// balancing, retries' bookkeeping, the transport) to an origin on loopback, on
// DefaultTransport (h1Client) and on NetHTTPTransport (net/http's Transport, the leg
// before it), each also through httputil.ReverseProxy (-reverseproxy: the loop's
// reference, as the pool used it before). Run:
//
//	go test -run - -bench ProxyLeg -benchmem ./edge/upstream/
//
// allocs/op is the allocations per proxied request of the edge's side (the origin
// allocates none; the request's context and copy, 3 of them, are the server's);
// ns/op includes the origin's work and the loopback round trip.
func BenchmarkProxyLeg(b *testing.B) {
	for _, leg := range []struct {
		name      string
		nt        func(Target, *Config) Transport
		reference bool
	}{
		{"h1client", DefaultTransport, false},
		{"h1client-reverseproxy", DefaultTransport, true},
		{"nethttp", NetHTTPTransport, false},
		{"nethttp-reverseproxy", NetHTTPTransport, true},
	} {
		b.Run(leg.name, func(b *testing.B) {
			p := newPool(b, Config{Targets: []Target{tgt(b, cannedOrigin(b), 1)}, NewTransport: leg.nt})
			b.Cleanup(p.Close)
			var h http.Handler = p
			if leg.reference {
				h = referenceProxy(p)
			}
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest("GET", "http://app.example/api/x?id=1", nil)
				req.RemoteAddr = "127.0.0.1:40000"
				req.Header.Set("User-Agent", "bench")
				req.Header.Set("Accept", "*/*")
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					// Every server gives each request a context of its own that it
					// cancels at the end; the watch of it is part of the leg's cost.
					ctx, cancel := context.WithCancel(context.Background())
					h.ServeHTTP(w, req.WithContext(ctx))
					cancel()
					if w.status != http.StatusOK {
						b.Fatalf("status %d", w.status)
					}
				}
			})
		})
	}
}

// BenchmarkContextWatch compares the two ways h1Conn could watch a request's context:
// context.AfterFunc at the start of every exchange, or the connection's timer, whose
// Reset and Stop are all an exchange that ends within watchDelay costs (h1Conn.watch).
// The request's own context (WithCancel, 2 allocations) is in both.
//
//	go test -run - -bench ContextWatch -benchmem ./edge/upstream/
func BenchmarkContextWatch(b *testing.B) {
	abort := func() {}
	b.Run("afterfunc", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := context.WithCancel(context.Background())
			stop := context.AfterFunc(ctx, abort)
			stop()
			cancel()
		}
	})
	b.Run("timer", func(b *testing.B) {
		t := time.AfterFunc(time.Hour, abort)
		for b.Loop() {
			ctx, cancel := context.WithCancel(context.Background())
			_ = ctx
			t.Reset(watchDelay)
			t.Stop()
			cancel()
		}
	})
}
