package edge

import (
	"bufio"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// Bytes a client sends with its HTTP/1.1 Upgrade, before the 101 comes, reach the
// origin ahead of the rest (they were in the server's buffer when the proxy took the
// connection).
func TestWebSocketBytesWithHandshake(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		switch101(brw, r)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.Copy(c, brw.Reader) // an echo
	}))
	t.Cleanup(origin.Close)
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"ws": {Targets: []string{origin.URL}}}
		c.Routes = []config.Route{{Name: "ws", Upstream: "ws"}}
	})
	conn, err := tls.Dial("tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// One write: the handshake and the first bytes of the tunnel together.
	fmt.Fprintf(conn, "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nEARLY")
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	io.WriteString(conn, "LATE")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 9)
	n, err := io.ReadFull(br, b)
	if string(b[:n]) != "EARLYLATE" {
		t.Errorf("echo %q (%v), want %q: the bytes sent with the handshake were lost", b[:n], err, "EARLYLATE")
	}
}

// switch101 answers the WebSocket handshake r on a hijacked connection's brw.
func switch101(brw *bufio.ReadWriter, r *http.Request) {
	sum := sha1.Sum([]byte(r.Header.Get("Sec-Websocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		base64.StdEncoding.EncodeToString(sum[:]))
	brw.Flush()
}
