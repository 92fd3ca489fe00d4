package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/h3edge/h3edge/edge/config"
)

// The tests of this file hold the README's promises about the public listeners: the
// header read timeout on every protocol, the settings advertised, and the edge's own
// answers (problem documents, counted, logged).

// TestStats429CountsStreamRefusals: the dashboard's 429s are the stream budget's
// prebuilt 429s too, the ones refused_streams_total counts, so both tell one story.
func TestStats429CountsStreamRefusals(t *testing.T) {
	e := startEdge(t, func(c *config.Config) { c.IP.Streams = config.Rate{Rate: 0.001, Burst: 2} })
	for _, proto := range []string{"h2", "h1"} {
		c := clientFor(t, proto)
		for range 5 {
			resp, err := c.Get(e.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	// Both protocols share 127.0.0.1's budget: 2 served, 8 prebuilt 429s.
	refused := uint64(counterValue(t, e.Server, "h3edge_refused_streams_total", "proto", "h1", "reason", "rate") +
		counterValue(t, e.Server, "h3edge_refused_streams_total", "proto", "h2", "reason", "rate"))
	if refused != 8 {
		t.Fatalf("refused_streams_total{proto=~h1|h2} = %d, want 8", refused)
	}
	resp, err := adminClient.Get("http://" + e.AdminAddr().String() + "/api/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct{ Requests map[string]map[string]uint64 }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	var total, tooMany uint64
	for _, p := range []string{"h1", "h2"} {
		total += st.Requests[p]["total"]
		tooMany += st.Requests[p]["429"]
	}
	if tooMany != refused || total != 10 {
		t.Errorf("stats: %d 429s of %d requests, want %d of 10 (refused_streams_total)", tooMany, total, refused)
	}
}

// TestUpstreamTLSFailureLogged: an https:// upstream whose certificate the edge does
// not trust answers 502, and the log says why.
func TestUpstreamTLSFailureLogged(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	var logs syncBuffer
	e := startEdgeWith(t, func(c *config.Config) { c.Upstream = up.URL }, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, p := range protos {
		resp, body := do(t, clientFor(t, p.name), "GET", e.url+"/", nil, nil)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %q %s, want a 502 problem", p.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	out := logs.String()
	if n := strings.Count(out, `msg="upstream exchange failed"`); n != len(protos) {
		t.Errorf("%d upstream failures logged, want %d:\n%s", n, len(protos), out)
	}
	if !strings.Contains(out, `reason="x509: certificate signed by unknown authority"`) {
		t.Errorf("the log does not name the TLS failure:\n%s", out)
	}
}

// h2Dial opens a TLS connection that speaks HTTP/2 (ALPN h2), sends the preface and an
// empty SETTINGS frame, and returns a framer on it.
func h2Dial(t testing.TB, addr string) (*tls.Conn, *http2.Framer) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return conn, fr
}

// TestSettingsAdvertised: both HTTP/2 (through package xconnect) and HTTP/3 advertise
// extended CONNECT. An extended CONNECT for anything but WebSocket gets a 501 problem
// document and never reaches the upstream (it used to be forwarded as a plain CONNECT
// and answered 400); a WebSocket one to an upstream that answers its handshake 200
// without switching protocols, or switches with the accept of another key, gets 502,
// not a 200 that would tell the client its tunnel is open.
func TestSettingsAdvertised(t *testing.T) {
	var upstreamSaw atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamSaw.Add(1)
		if r.URL.Path == "/wrong-accept" {
			// Switches, but with an accept of another key: not this handshake's answer.
			c, brw, _ := http.NewResponseController(w).Hijack()
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
				"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
			brw.Flush()
			io.Copy(io.Discard, c)
			return
		}
		io.WriteString(w, "no WebSocket here")
	}))
	t.Cleanup(up.Close)
	e := startEdge(t, func(c *config.Config) { c.Upstream = up.URL })

	t.Run("h2", func(t *testing.T) {
		conn, fr := h2Dial(t, e.Addr().String())
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			sf, ok := f.(*http2.SettingsFrame)
			if !ok || sf.IsAck() {
				continue
			}
			if v, ok := sf.Value(http2.SettingEnableConnectProtocol); !ok || v != 1 {
				t.Errorf("HTTP/2 SETTINGS_ENABLE_CONNECT_PROTOCOL = %d (sent: %v), want 1", v, ok)
			}
			return
		}
	})

	t.Run("h3", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		qc, err := quic.DialAddr(ctx, e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer qc.CloseWithError(0, "")
		cc := (&http3.Transport{}).NewClientConn(qc)
		select {
		case <-cc.ReceivedSettings():
		case <-ctx.Done():
			t.Fatal("no SETTINGS from the server")
		}
		if !cc.Settings().EnableExtendedConnect {
			t.Error("HTTP/3 does not advertise SETTINGS_ENABLE_CONNECT_PROTOCOL")
		}
		connect := func(protocol, path string) (int, string, []byte) {
			u, _ := url.Parse(e.url + path)
			req := (&http.Request{Method: http.MethodConnect, URL: u, Proto: protocol, Host: u.Host,
				Header: http.Header{"Sec-Websocket-Version": {"13"}}}).WithContext(ctx)
			resp, err := cc.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("Content-Type"), body
		}
		if code, ct, body := connect("connect-udp", "/chat"); code != http.StatusNotImplemented || ct != "application/problem+json" {
			t.Errorf("extended CONNECT connect-udp: %d %q %s, want a 501 problem document", code, ct, body)
		}
		if n := upstreamSaw.Load(); n != 0 {
			t.Errorf("the upstream saw %d requests, want none", n)
		}
		if code, ct, body := connect("websocket", "/chat"); code != http.StatusBadGateway || ct != "application/problem+json" || strings.Contains(string(body), "no WebSocket") {
			t.Errorf("WebSocket to a plain upstream: %d %q %s, want a 502 problem document", code, ct, body)
		}
		if code, ct, body := connect("websocket", "/wrong-accept"); code != http.StatusBadGateway || ct != "application/problem+json" {
			t.Errorf("WebSocket answered with a wrong accept: %d %q %s, want a 502 problem document", code, ct, body)
		}
		if n := upstreamSaw.Load(); n != 2 {
			t.Errorf("the upstream saw %d requests, want the two handshakes", n)
		}
	})
}

// headerTimeoutSlack is how much later than the header read timeout a connection may
// close: the README promises 10 s, the acceptance ≤ 11 s.
const headerTimeoutSlack = time.Second

// checkClosedIn reports whether a connection closed within [d, d+headerTimeoutSlack]
// after start: closed is when the client saw it close.
func checkClosedIn(t testing.TB, start, closed time.Time, d time.Duration) {
	t.Helper()
	took := closed.Sub(start)
	t.Logf("closed %v after the header section began (timeout %v)", took.Round(time.Millisecond), d)
	if took < d-50*time.Millisecond || took > d+headerTimeoutSlack {
		t.Errorf("closed after %v, want within %v of %v", took, headerTimeoutSlack, d)
	}
}

// TestHeaderTimeoutH2 sends a HEADERS frame without END_HEADERS, then a CONTINUATION
// every 2 s that never ends the section either: the connection must close at the
// header read timeout — the real 10 s here, with nothing shortened.
func TestHeaderTimeoutH2(t *testing.T) {
	t.Parallel()
	e := startEdge(t, nil)
	conn, fr := h2Dial(t, e.Addr().String())
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	field := func(name, value string) []byte {
		buf.Reset()
		enc.WriteField(hpack.HeaderField{Name: name, Value: value})
		return append([]byte(nil), buf.Bytes()...)
	}
	var block []byte
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "127.0.0.1"}, {":path", "/"}} {
		block = append(block, field(f[0], f[1])...)
	}
	start := time.Now()
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	// The framer is not safe for concurrent use, but only trickle's goroutine writes.
	trickle(t, 2*time.Second, func(i int) error {
		return fr.WriteContinuation(1, false, field(fmt.Sprintf("x-slow-%d", i), "v"))
	})
	h2ClosedIn(t, conn, fr, start, readHeaderTimeout)
}

// trickle calls send(0), send(1), … every period on its own goroutine until send fails
// or the test ends.
func trickle(t testing.TB, period time.Duration, send func(i int) error) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if send(i) != nil {
				return
			}
		}
	}()
}

// h2ClosedIn reads frames from conn until the edge closes it, and reports whether that
// was within [d, d+headerTimeoutSlack] of start.
func h2ClosedIn(t testing.TB, conn net.Conn, fr *http2.Framer, start time.Time, d time.Duration) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(d + 5*time.Second))
	for {
		if _, err := fr.ReadFrame(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection is still open %v after the header section began", time.Since(start).Round(time.Millisecond))
			}
			checkClosedIn(t, start, time.Now(), d)
			return
		}
	}
}

// TestHeaderTimeoutH1 sends a request line and one header line every 300 ms, never the
// empty line that ends the section (the timeout shortened through Options).
func TestHeaderTimeoutH1(t *testing.T) {
	const d = 2 * time.Second
	e := startEdgeWith(t, nil, Options{headerTimeout: d})
	conn, err := tls.Dial("tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
		t.Fatal(err)
	}
	trickle(t, 300*time.Millisecond, func(i int) error {
		_, err := fmt.Fprintf(conn, "X-Slow-%d: v\r\n", i)
		return err
	})
	conn.SetReadDeadline(time.Now().Add(d + 5*time.Second))
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open %v after the request line", time.Since(start).Round(time.Millisecond))
	}
	checkClosedIn(t, start, time.Now(), d)
}

// TestH2HeaderGuardFollow: the guard's frame state, whatever the reads' sizes: a header
// section is pending from its HEADERS frame's header to the end of the frame that
// carries END_HEADERS.
// TestHeaderTimeoutH2PartialFrame sends 5 of a frame header's 9 bytes and stops: the
// section that frame would begin is pending too, and the connection closes at the
// header read timeout (shortened through Options) instead of the idle timeout.
func TestHeaderTimeoutH2PartialFrame(t *testing.T) {
	t.Parallel()
	const d = 2 * time.Second
	e := startEdgeWith(t, nil, Options{headerTimeout: d})
	conn, fr := h2Dial(t, e.Addr().String())
	start := time.Now()
	if _, err := conn.Write([]byte{0, 0, 16, 0x1 /* HEADERS */, 0}); err != nil {
		t.Fatal(err)
	}
	h2ClosedIn(t, conn, fr, start, d)
}

// TestHeaderTimeoutH3 opens a request stream and sends half a HEADERS frame: the stream
// must be ended at the header read timeout (shortened through Options, the code path
// of the real one).
func TestHeaderTimeoutH3(t *testing.T) {
	const d = 2 * time.Second
	e := startEdgeWith(t, nil, Options{headerTimeout: d})
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	// The control stream with an empty SETTINGS frame, as a client opens it.
	ctrl, err := conn.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.Write([]byte{0x00, 0x04, 0x00}); err != nil {
		t.Fatal(err)
	}
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fields bytes.Buffer
	enc := qpack.NewEncoder(&fields)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "127.0.0.1"}, {":path", "/"}} {
		enc.WriteField(qpack.HeaderField{Name: f[0], Value: f[1]})
	}
	frame := quicvarint.Append(nil, 0x01) // HEADERS
	frame = quicvarint.Append(frame, uint64(fields.Len()))
	frame = append(frame, fields.Bytes()[:fields.Len()/2]...)
	start := time.Now()
	if _, err := str.Write(frame); err != nil {
		t.Fatal(err)
	}
	str.SetReadDeadline(time.Now().Add(d + 5*time.Second))
	_, err = str.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the stream is still open %v after half a HEADERS frame", time.Since(start).Round(time.Millisecond))
	}
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeRequestIncomplete) {
		t.Errorf("stream ended with %v, want H3_REQUEST_INCOMPLETE", err)
	}
	checkClosedIn(t, start, time.Now(), d)
	// The connection serves on.
	if code := rawH3Request(t, ctx, conn, "GET", "127.0.0.1", "/"); code != 200 {
		t.Errorf("after the timeout: %d", code)
	}

	// The deadline bounds the header section only: a body may take longer.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("early "))
		time.Sleep(d + 500*time.Millisecond) // the body's pace, not synchronisation
		pw.Write([]byte("late"))
		pw.Close()
	}()
	var reply demoReply
	req, _ := http.NewRequest("POST", e.url+"/", pr)
	if resp := getJSON(t, clientFor(t, "h3"), req, &reply); resp.StatusCode != 200 || reply.BodyBytes != int64(len("early late")) {
		t.Errorf("a slow body: %d, %d bytes read, want 200 and %d", resp.StatusCode, reply.BodyBytes, len("early late"))
	}
}

// TestNegativeContentLengthHTTP1: net/http refuses a negative Content-Length while
// reading the request, before any handler, with a plain-text 400 it writes to the
// connection itself and then closes it (net/http server.go, conn.serve: readRequest's
// error path); no hook reaches that answer, so it cannot be h3edge's problem document
// nor counted. What h3edge can promise: a 400, the connection closed, no handler run.
func TestNegativeContentLengthHTTP1(t *testing.T) {
	e := startEdge(t, nil)
	before := counterValue(t, e.Server, "h3edge_requests_total", "proto", "h1", "code", "400")
	conn, err := tls.Dial("tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n")
	reply, err := io.ReadAll(conn) // to the close
	if err != nil {
		t.Fatalf("the connection was not closed: %v", err)
	}
	if !strings.HasPrefix(string(reply), "HTTP/1.1 400 ") || !strings.Contains(string(reply), "\r\nConnection: close\r\n") {
		t.Errorf("reply %q, want net/http's 400 and the connection closed", reply)
	}
	if n := counterValue(t, e.Server, "h3edge_requests_total", "proto", "h1", "code", "400") - before; n != 0 {
		t.Errorf("a handler ran: requests_total{h1,400} grew by %v", n)
	}
}
