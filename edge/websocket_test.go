package edge

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/h3edge/h3edge/edge/config"
)

// TestWebSocketThroughRoute: WebSocket over HTTP/1.1 (Upgrade) through a route to an
// echo origin: 1 000 messages both ways; a concurrent-requests policy of 2 holds a unit
// per open socket, so a third is refused with 429 until one closes; max_duration ends
// a socket.
func TestWebSocketThroughRoute(t *testing.T) {
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	t.Cleanup(echo.Close)
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"ws": {Targets: []string{echo.URL}}}
		c.Routes = []config.Route{
			{Name: "short", Upstream: "ws", Match: config.RouteMatch{PathPrefix: "/short/"}, MaxDuration: 2 * time.Second},
			{Name: "ws", Upstream: "ws"},
		}
		c.Policies = []config.Policy{{Name: "sockets", Match: config.Match{Route: "ws"}, Key: []string{"ip"}, Unit: "concurrent-requests", Quota: 2}}
	})
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
