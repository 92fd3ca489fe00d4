package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// halfCloseOrigin answers a WebSocket handshake, reads what comes until the client's
// side ends, then answers with what it read. With linger it then keeps the
// connection open instead of closing it (an origin that ignores the end).
func halfCloseOrigin(t *testing.T, linger bool) *httptest.Server {
	stop := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		switch101(brw, r)
		c.SetDeadline(time.Now().Add(20 * time.Second))
		got, err := io.ReadAll(brw.Reader)
		if err != nil {
			return // no end came: nothing to answer
		}
		fmt.Fprintf(c, "you sent %q", got)
		if linger {
			<-stop // its side stays open: the edge must give up on it
		}
	}))
	t.Cleanup(func() { close(stop); s.Close() })
	return s
}

// TestWebSocketHalfClose: a client that ends its side of a WebSocket (a TLS
// close_notify on HTTP/1.1, END_STREAM on HTTP/2 and HTTP/3, as after a close frame)
// still gets what the origin sends after it: the end reaches the origin as a FIN,
// and the tunnel lasts until the origin ends too — or, for an origin that does not,
// until the pool's timeout.
func TestWebSocketHalfClose(t *testing.T) {
	answers := halfCloseOrigin(t, false)
	lingers := halfCloseOrigin(t, true)
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{
			"answers": {Targets: []string{answers.URL}},
			"lingers": {Targets: []string{lingers.URL}, Timeout: 2 * time.Second},
		}
		c.Routes = []config.Route{
			{Name: "lingers", Upstream: "lingers", Match: config.RouteMatch{PathPrefix: "/lingers/"}},
			{Name: "answers", Upstream: "answers"},
		}
	})
	const want = `you sent "HELLO"`
	for _, proto := range []string{"h1", "h2", "h3"} {
		for _, path := range []string{"/answers", "/lingers/"} {
			t.Run(proto+path, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
				defer cancel()
				var out interface {
					io.Writer
					CloseWrite() error
				}
				var in io.Reader
				if proto == "h1" {
					conn, err := tls.Dial("tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					conn.SetDeadline(time.Now().Add(15 * time.Second))
					fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
						"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path)
					br := bufio.NewReader(conn)
					if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
						t.Fatalf("handshake: %v %v", resp, err)
					}
					out, in = conn, br
				} else {
					c, resp, err := wsDial(ctx, t, proto, e.url+path)
					if err != nil || c == nil {
						t.Fatalf("extended CONNECT: %v %v", resp, err)
					}
					defer c.Close()
					out, in = closeWriteFunc{c.out}, c.in
				}
				io.WriteString(out, "HELLO")
				if err := out.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				got, err := io.ReadAll(in)
				took := time.Since(start)
				if string(got) != want {
					t.Fatalf("after the client's end: %q (%v, %v), want %q: the origin's answer to it was lost", got, err, took, want)
				}
				if path == "/lingers/" && took < time.Second {
					t.Errorf("the tunnel to an origin that keeps its side open ended after %v, want the pool's timeout (2s)", took)
				}
				t.Logf("%s: %q, then the end after %v (%v)", path, got, took.Round(time.Millisecond), err)
			})
		}
	}
}

// closeWriteFunc ends an extended CONNECT's sending side (END_STREAM) as a TCP
// connection's CloseWrite would.
type closeWriteFunc struct{ io.WriteCloser }

func (c closeWriteFunc) CloseWrite() error { return c.Close() }
