package edge

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
)

// wsRoutes is the configuration of the WebSocket tests: a pool of the echo origin at
// echoURL, a route "short" (/short/) with max_duration 2s and a catch-all "ws" whose
// sockets a concurrent-requests policy holds to 2 per client.
func wsRoutes(echoURL string) func(*config.Config) {
	return func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"ws": {Targets: []string{echoURL}}}
		c.Routes = []config.Route{
			{Name: "short", Upstream: "ws", Match: config.RouteMatch{PathPrefix: "/short/"}, MaxDuration: 2 * time.Second},
			{Name: "ws", Upstream: "ws"},
		}
		c.Policies = []config.Policy{{Name: "sockets", Match: config.Match{Route: "ws"}, Key: []string{"ip"}, Unit: "concurrent-requests", Quota: 2}}
	}
}

// TestWebSocketThroughRoute: WebSocket over HTTP/1.1 (Upgrade) through a route to an
// echo origin: 1 000 messages both ways; a concurrent-requests policy of 2 holds a unit
// per open socket, so a third is refused with 429 until one closes; max_duration ends
// a socket.
func TestWebSocketThroughRoute(t *testing.T) {
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	t.Cleanup(echo.Close)
	e := startEdge(t, wsRoutes(echo.URL))
	dial := func(path string) (*websocket.Conn, error) {
		cfg, err := websocket.NewConfig("wss://"+e.Addr().String()+path, "https://"+e.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		cfg.TlsConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
		return websocket.DialConfig(cfg)
	}
	first, err := dial("/echo")
	if err != nil {
		t.Fatalf("first socket: %v", err)
	}
	defer first.Close()
	second, err := dial("/echo")
	if err != nil {
		t.Fatalf("second socket: %v", err)
	}
	defer second.Close()

	// 1 000 messages both ways on the first, one at a time.
	buf := make([]byte, 64)
	for i := range 1000 {
		msg := fmt.Sprintf("message %d", i)
		if _, err := first.Write([]byte(msg)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		n, err := first.Read(buf)
		if err != nil || string(buf[:n]) != msg {
			t.Fatalf("read %d: %q %v, want %q", i, buf[:n], err, msg)
		}
	}

	// A third socket is over the policy's 2: refused with 429.
	_, err = dial("/echo")
	var de *websocket.DialError
	if !errors.As(err, &de) || !errors.Is(de.Err, websocket.ErrBadStatus) {
		t.Fatalf("third socket: %v, want a refused handshake", err)
	}
	req, _ := http.NewRequest("GET", e.url+"/echo", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := clientFor(t, "h1").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"sockets"`) {
		t.Errorf("third upgrade: %d %q, want 429 from sockets", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	// Closing one gives its unit back.
	first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		third, err := dial("/echo")
		if err == nil {
			third.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a socket closed, yet a new one is still refused: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// max_duration: 2s, then the edge ends the socket.
	short, err := dial("/short/echo")
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	start := time.Now()
	short.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = short.Read(buf)
	if took := time.Since(start); err == nil || took < 1900*time.Millisecond || took > 3*time.Second {
		t.Errorf("short socket: read returned %v after %v, want the socket closed at 2s", err, took)
	}
}

// TestWebSocketExtendedConnect: WebSocket over HTTP/2 (RFC 8441) and HTTP/3 (RFC 9220)
// through a route to a real WebSocket echo origin (x/net/websocket, HTTP/1.1): the
// edge turns the extended CONNECT into an Upgrade and the 101 into a 200; 1 000
// messages go both ways; a concurrent-requests policy of 2 refuses the third socket
// with 429 until one closes; max_duration ends a socket at 2 s.
func TestWebSocketExtendedConnect(t *testing.T) {
	var handshakes atomic.Int64
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) {
		handshakes.Add(1)
		io.Copy(ws, ws)
	}))
	t.Cleanup(echo.Close)
	// Each protocol's sockets are a key of their own: the units of the h2 subtest's
	// last sockets come back when the edge sees them end, which may be after the h3
	// subtest has opened its first two.
	e := startEdge(t, func(c *config.Config) {
		wsRoutes(echo.URL)(c)
		c.Policies[0].Key = []string{"query:client"}
	})
	for _, proto := range []string{"h2", "h3"} {
		t.Run(proto, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			dial := func(path string) (*wsClient, *http.Response) {
				t.Helper()
				c, resp, err := wsDial(ctx, t, proto, e.url+path+"?client="+proto)
				if err != nil {
					t.Fatalf("extended CONNECT %s: %v", path, err)
				}
				return c, resp
			}
			first, resp := dial("/echo")
			if first == nil {
				t.Fatalf("first socket: %d, want 200", resp.StatusCode)
			}
			defer first.Close()
			for _, h := range []string{"Upgrade", "Connection", "Sec-Websocket-Accept"} {
				if v := resp.Header.Get(h); v != "" {
					t.Errorf("the 200 carries the upstream's %s: %q", h, v)
				}
			}
			second, resp := dial("/echo")
			if second == nil {
				t.Fatalf("second socket: %d, want 200", resp.StatusCode)
			}
			defer second.Close()

			// 1 000 messages both ways, on two sockets at once so they cannot be mixed up.
			for i := range 1000 {
				for j, c := range []*wsClient{first, second} {
					msg := fmt.Sprintf("socket %d message %d %s", j, i, strings.Repeat("x", i%300))
					if err := c.Send([]byte(msg)); err != nil {
						t.Fatalf("send %d on %d: %v", i, j, err)
					}
					got, err := c.Recv()
					if err != nil || string(got) != msg {
						t.Fatalf("echo %d on %d: %.40q %v, want %.40q", i, j, got, err, msg)
					}
				}
			}

			// The third is over the policy's 2.
			third, resp := dial("/echo")
			if third != nil {
				third.Close()
				t.Fatal("a third socket opened with a concurrent-requests quota of 2")
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"sockets"`) {
				t.Errorf("third socket: %d %q %s, want 429 from sockets", resp.StatusCode, resp.Header.Get("RateLimit-Policy"), body)
			}
			// Closing one gives its unit back.
			first.Close()
			testkit.WaitFor(t, 5*time.Second, "a socket's unit back after it closed", func() bool {
				c, _ := dial("/echo")
				if c != nil {
					c.Close()
				}
				return c != nil
			})

			// max_duration: 2s, then the edge ends the socket.
			short, resp := dial("/short/echo")
			if short == nil {
				t.Fatalf("short socket: %d", resp.StatusCode)
			}
			defer short.Close()
			start := time.Now()
			_, err := short.Recv()
			if took := time.Since(start); err == nil || took < 1900*time.Millisecond || took > 5*time.Second {
				t.Errorf("short socket: read returned %v after %v, want the socket ended at 2s", err, took)
			} else {
				t.Logf("short socket ended after %v: %v", took.Round(time.Millisecond), err)
			}
		})
	}
	if n := handshakes.Load(); n < 8 {
		t.Errorf("the echo origin saw %d WebSocket handshakes, want at least 8", n)
	}
}

// TestWebSocketCountedAndLogged: a WebSocket is a request like any other in
// route_requests_total and the access log, with the status its client saw — 101 on
// HTTP/1.1, 200 on HTTP/2 and HTTP/3 (the extended CONNECT's answer) — and the bytes
// the edge sent it. (The extended CONNECT's writer once hid the metrics' recorder
// from the route step, and the HTTP/1.1 switch was logged as 200.)
func TestWebSocketCountedAndLogged(t *testing.T) {
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	t.Cleanup(echo.Close)
	path := filepath.Join(t.TempDir(), "access.log")
	e := startOps(t, withAccessLog(&config.AccessLogConfig{Path: path}, wsRoutes(echo.URL)), "", nil)
	const msg = "hello through the edge"
	for _, proto := range []string{"h1", "h2", "h3"} {
		if proto == "h1" {
			cfg, err := websocket.NewConfig("wss://"+e.Addr().String()+"/echo", "https://"+e.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			cfg.TlsConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
			ws, err := websocket.DialConfig(cfg)
			if err != nil {
				t.Fatalf("h1: %v", err)
			}
			buf := make([]byte, 64)
			if _, err := ws.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			if n, err := ws.Read(buf); err != nil || string(buf[:n]) != msg {
				t.Fatalf("h1 echo: %q %v", buf[:n], err)
			}
			ws.Close()
			continue
		}
		ws, resp, err := wsDial(t.Context(), t, proto, e.url+"/echo")
		if err != nil || ws == nil {
			t.Fatalf("%s: %v %v", proto, resp, err)
		}
		if err := ws.Send([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if got, err := ws.Recv(); err != nil || string(got) != msg {
			t.Fatalf("%s echo: %q %v", proto, got, err)
		}
		ws.Close()
	}
	// The sockets' handlers end once the edge sees them closed.
	for _, want := range []string{
		`h3edge_route_requests_total{code="101",proto="h1",route="ws"} 1`,
		`h3edge_route_requests_total{code="200",proto="h2",route="ws"} 1`,
		`h3edge_route_requests_total{code="200",proto="h3",route="ws"} 1`,
		`h3edge_requests_total{code="101",proto="h1"} 1`,
	} {
		testkit.WaitFor(t, 10*time.Second, "/metrics to show "+want, func() bool {
			return strings.Contains(metricsText(t, e.Server), want)
		})
	}
	e.Close() // every request has ended: the log is written out
	lines := readLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d lines for 3 sockets:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	wantStatus := map[string]int{"HTTP/1.1": 101, "HTTP/2.0": 200, "HTTP/3.0": 200}
	for i, line := range lines {
		var l accessLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		// The echo's frame back: the message and a header of 2 to 6 bytes.
		if l.Status != wantStatus[l.Proto] || l.Route == nil || *l.Route != "ws" || l.Bytes < int64(len(msg)) {
			t.Errorf("line %d: %s\nwant status %d, route ws and at least %d bytes", i, line, wantStatus[l.Proto], len(msg))
		}
	}
}

// TestWebSocketIdlePastBodyTimeout: a WebSocket over HTTP/2 or HTTP/3 is a stream, not
// a request body: a socket idle for longer than body_read_timeout still carries the
// next message. (The body timeout once ran before the extended CONNECT became a
// tunnel, and ended every such socket idle for that long.)
func TestWebSocketIdlePastBodyTimeout(t *testing.T) {
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	t.Cleanup(echo.Close)
	const d = time.Second
	e := startEdge(t, func(c *config.Config) {
		wsRoutes(echo.URL)(c)
		c.Limits.BodyReadTimeout = d
	})
	for _, proto := range []string{"h2", "h3"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			ws, resp, err := wsDial(t.Context(), t, proto, e.url+"/echo")
			if err != nil || ws == nil {
				t.Fatalf("%v %v", resp, err)
			}
			defer ws.Close()
			// Idle past the timeout: the time is what is tested.
			timer := time.NewTimer(d + time.Second)
			<-timer.C
			if err := ws.Send([]byte("still there")); err != nil {
				t.Fatal(err)
			}
			if got, err := ws.Recv(); err != nil || string(got) != "still there" {
				t.Fatalf("echo after %v idle: %q %v", d+time.Second, got, err)
			}
		})
	}
}

// A WebSocket over HTTP/2 or HTTP/3 whose client stops reading while the origin
// pushes is stalled by the stream's flow control, which no TCP write shows: it ends at
// the route's max_duration (/short/), or else at limits.write_timeout (1 s here), and
// lets go of its upstream connection (max_connections: 1) for the next socket.
func TestWebSocketStalledReaderEnds(t *testing.T) {
	origin := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) {
		msg := make([]byte, 32<<10)
		ws.SetWriteDeadline(time.Now().Add(20 * time.Second)) // bounded whatever the edge does
		for {
			if _, err := ws.Write(msg); err != nil {
				return
			}
		}
	}))
	t.Cleanup(origin.Close)
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"ws": {Targets: []string{origin.URL}, MaxConnections: 1, Timeout: 2 * time.Second}}
		c.Routes = []config.Route{
			{Name: "short", Upstream: "ws", Match: config.RouteMatch{PathPrefix: "/short/"}, MaxDuration: 500 * time.Millisecond},
			{Name: "ws", Upstream: "ws"},
		}
		c.Limits.WriteTimeout = time.Second
	})
	for _, proto := range []string{"h2", "h3"} {
		for _, path := range []string{"/short/push", "/push"} {
			t.Run(proto+path, func(t *testing.T) {
				stalled, resp, err := wsDial(t.Context(), t, proto, e.url+path)
				if err != nil || stalled == nil {
					t.Fatalf("%v %v", resp, err)
				}
				defer stalled.Close()
				// The client reads nothing from here on.
				testkit.WaitFor(t, 10*time.Second, "the stalled tunnel to end", func() bool { return e.inflight.Load() == 0 })
				next, resp, err := wsDial(t.Context(), t, proto, e.url+"/short/push")
				if err != nil {
					t.Fatal(err)
				}
				if next == nil {
					t.Fatalf("the next socket got %d: the stalled tunnel still holds the target's one connection", resp.StatusCode)
				}
				next.Close()
			})
		}
	}
}
