// Package tunnel carries a WebSocket that came as an extended CONNECT (RFC 8441 on
// HTTP/2, RFC 9220 on HTTP/3) to an HTTP/1.1 upstream as the Upgrade it knows: the
// request becomes a GET with Upgrade: websocket and a key of the edge's own, and the
// upstream's 101 becomes the 200 that opens the tunnel on the client's stream.
//
// It is not part of package xconnect, which must import nothing that imports
// net/http (its init has to run before net/http's HTTP/2 server reads GODEBUG).
package tunnel

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// New returns the HTTP/1.1 Upgrade request that stands for the extended CONNECT
// r, and the ResponseWriter that turns the upstream's 101 back into the 200 that opens
// the tunnel on r's stream. maxHead bounds the 101's head; writeTimeout, if
// positive, bounds each write of the tunnel's bytes to the stream (a client that
// stops reading stalls it on flow control: the write fails, and the proxy ends the
// tunnel); badHandshake answers an upstream that answered 2xx without switching (a
// 2xx would tell the client its tunnel is open). Call Close when the handler returns.
func New(w http.ResponseWriter, r *http.Request, maxHead int, writeTimeout time.Duration, badHandshake func(http.ResponseWriter, *http.Request)) (*http.Request, *Tunnel) {
	var nonce [16]byte
	rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	up := new(http.Request)
	*up = *r
	up.Method = http.MethodGet
	if r.ProtoMajor == 3 {
		up.Proto = "HTTP/3.0"
	}
	up.Header = r.Header.Clone()
	delete(up.Header, ":protocol")
	// The handshake the upstream sees (RFC 8441 §5: the key and the accept are
	// HTTP/1.1's alone, so the edge makes the one and checks the other).
	up.Header["Connection"] = []string{"Upgrade"}
	up.Header["Upgrade"] = []string{"websocket"}
	up.Header["Sec-Websocket-Key"] = []string{key}
	// The stream's data is the tunnel's, not a body: the transport must not send it.
	up.Body, up.ContentLength = http.NoBody, 0
	return up, &Tunnel{w: w, r: r, body: r.Body, accept: acceptKey(key), maxHead: maxHead, writeTimeout: writeTimeout, badHandshake: badHandshake}
}

// acceptKey is the Sec-WebSocket-Accept a WebSocket server answers key with (RFC 6455
// §4.2.2).
func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// Tunnel is the ResponseWriter of a WebSocket that came as an extended CONNECT. To the
// handlers it is an HTTP/1.1 connection that can be hijacked, as the proxy (upstream.Pool) does
// on 101 Switching Protocols; the 101 head the proxy then writes into the connection
// becomes a 200 on the stream, and the rest of what it writes is sent as the stream's
// data, flushed at once. Reads come from the request stream.
//
// Answers other than the switch pass through as they are, but for a 2xx: an upstream
// that answers the handshake 2xx without switching is no WebSocket server, and a 2xx
// would tell the client its tunnel is open, so it becomes 502.
type Tunnel struct {
	w      http.ResponseWriter
	r      *http.Request // the extended CONNECT, for the 502's problem document
	body   io.ReadCloser
	accept string // the Sec-WebSocket-Accept the upstream must send

	maxHead      int
	writeTimeout time.Duration
	badHandshake func(http.ResponseWriter, *http.Request)

	// open is set with state tunnelOpen, for Close, which must not wait for mu
	// while a write stalls holding it.
	open atomic.Bool

	// mu guards the state and the head; Write holds it while it writes, so that close
	// (on the handler's goroutine, when it returns) waits for a write from
	// the proxy's copying goroutine to end: the stream must not be written to after
	// the handler returned.
	mu    sync.Mutex
	state tunnelState
	head  []byte // of the 101, until its end
}

type tunnelState int

const (
	tunnelHandshake tunnelState = iota // not hijacked: an ordinary response
	tunnelDiscard                      // a 2xx without the switch was answered 502: drop its body
	tunnelHead                         // hijacked: the proxy writes the 101's head
	tunnelOpen                         // the 200 is sent: bytes are the tunnel's
	tunnelClosed                       // the handler returned
)

var (
	errTunnelClosed = errors.New("tunnel: WebSocket tunnel closed")
	errBadAccept    = errors.New("tunnel: the upstream's Sec-WebSocket-Accept does not match the key the edge sent")
)

func (t *Tunnel) Header() http.Header { return t.w.Header() }

func (t *Tunnel) WriteHeader(code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != tunnelHandshake {
		return
	}
	if code >= 200 && code < 300 {
		t.state = tunnelDiscard
		clear(t.w.Header())
		t.badHandshake(t.w, t.r)
		return
	}
	t.w.WriteHeader(code)
}

func (t *Tunnel) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.state {
	case tunnelHandshake:
		return t.w.Write(p)
	case tunnelDiscard:
		return len(p), nil
	}
	return 0, http.ErrHijacked
}

// Flush sends what the handshake answer has written so far.
func (t *Tunnel) Flush() { t.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (t *Tunnel) FlushError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != tunnelHandshake {
		return nil
	}
	return http.NewResponseController(t.w).Flush()
}

// Unwrap gives http.ResponseController the stream's writer, for what the tunnel does
// not answer itself.
func (t *Tunnel) Unwrap() http.ResponseWriter { return t.w }

// Hijack hands the proxy the tunnel as a connection, once.
func (t *Tunnel) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != tunnelHandshake {
		return nil, nil, http.ErrHijacked
	}
	t.state = tunnelHead
	c := &tunnelConn{t: t}
	return c, bufio.NewReadWriter(bufio.NewReaderSize(c, 512), bufio.NewWriterSize(c, 4096)), nil
}

// write is the hijacked connection's Write.
func (t *Tunnel) write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.state {
	case tunnelOpen:
		rc := http.NewResponseController(t.w)
		if t.writeTimeout > 0 {
			rc.SetWriteDeadline(time.Now().Add(t.writeTimeout))
		}
		n, err := t.w.Write(p)
		if err == nil {
			err = rc.Flush()
		}
		return n, err
	case tunnelHead:
	default:
		return 0, errTunnelClosed
	}
	// The 101's head, as the proxy writes it: its fields are in t.w.Header()
	// already (the proxy copied them there), so only its end matters.
	t.head = append(t.head, p...)
	end := bytes.Index(t.head, []byte("\r\n\r\n"))
	if end < 0 {
		if len(t.head) > t.maxHead {
			return 0, errors.New("tunnel: the upstream's 101 head is too large")
		}
		return len(p), nil
	}
	rest := t.head[end+4:]
	t.head = nil
	h := t.w.Header()
	accept := h.Get("Sec-Websocket-Accept")
	for _, f := range h["Connection"] {
		for _, name := range strings.Split(f, ",") {
			delete(h, http.CanonicalHeaderKey(strings.TrimSpace(name)))
		}
	}
	for _, name := range []string{"Connection", "Upgrade", "Sec-Websocket-Accept", "Keep-Alive", "Transfer-Encoding", "Content-Length"} {
		delete(h, name)
	}
	if accept != t.accept {
		// Back to an ordinary answer: the proxy's error handler answers 502.
		t.state = tunnelHandshake
		return 0, errBadAccept
	}
	t.state = tunnelOpen
	t.open.Store(true)
	t.w.WriteHeader(http.StatusOK)
	if err := http.NewResponseController(t.w).Flush(); err != nil {
		return 0, err
	}
	if len(rest) > 0 {
		if _, err := t.w.Write(rest); err != nil {
			return 0, err
		}
		if err := http.NewResponseController(t.w).Flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Close ends the tunnel when the handler returns, or when the proxy ends it: later
// writes fail, a write stalled on a client that does not read fails now (its stream is
// reset), and a read of the client's side that is still waiting ends. Without a
// write in progress the stream ends as it would (END_STREAM when the handler returns).
func (t *Tunnel) Close() {
	if !t.mu.TryLock() { // a write holds mu: it may be stalled for good
		if t.open.Load() {
			http.NewResponseController(t.w).SetWriteDeadline(time.Now())
		}
		t.mu.Lock()
	}
	hijacked := t.state >= tunnelHead && t.state != tunnelClosed
	t.state = tunnelClosed
	t.mu.Unlock()
	if hijacked {
		t.body.Close()
	}
}

// tunnelConn is the Tunnel as the proxy's hijacked connection.
type tunnelConn struct{ t *Tunnel }

func (c *tunnelConn) Read(p []byte) (int, error)  { return c.t.body.Read(p) }
func (c *tunnelConn) Write(p []byte) (int, error) { return c.t.write(p) }

// Close ends the tunnel's client side; the stream itself ends when the handler
// returns.
func (c *tunnelConn) Close() error {
	c.t.Close()
	return nil
}

func (c *tunnelConn) LocalAddr() net.Addr              { return tunnelAddr{} }
func (c *tunnelConn) RemoteAddr() net.Addr             { return tunnelAddr{} }
func (c *tunnelConn) SetDeadline(time.Time) error      { return nil }
func (c *tunnelConn) SetReadDeadline(time.Time) error  { return nil }
func (c *tunnelConn) SetWriteDeadline(time.Time) error { return nil }

// tunnelAddr names the stream a tunnelConn runs over (the proxy asks for none).
type tunnelAddr struct{}

func (tunnelAddr) Network() string { return "stream" }
func (tunnelAddr) String() string  { return "extended-connect" }
