package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
)

// Regression tests of the attacks h3bench attack runs (bench/attack), each against a
// real edge on loopback, asserting what the defence does: the connection ended, the
// source charged or banned, the slow client cut off. None passes on the edge before
// the defences (edge/h2guard, edge/slowbody, admitH3Stream).

var loopback = netip.MustParseAddr("127.0.0.1")

// h2Block encodes a request's header block.
func h2Block(method, path string, extra ...hpack.HeaderField) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "127.0.0.1"}, {Name: ":path", Value: path},
	}, extra...) {
		enc.WriteField(f)
	}
	return buf.Bytes()
}

// h2ReadToEnd reads frames until the connection ends, and reports whether a GOAWAY
// with ENHANCE_YOUR_CALM came first. The connection must end within 5 s.
func h2ReadToEnd(t *testing.T, conn net.Conn, fr *http2.Framer) (calm bool) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Fatal("the abusive connection is still open after 5 s")
			}
			return calm
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok && ga.ErrCode == http2.ErrCodeEnhanceYourCalm {
			calm = true
		}
	}
}

// TestH2AbuseEndsConnection: each HTTP/2 abuse ends its connection, and the source is
// charged — Rapid Reset and MadeYouReset so much that one connection bans it.
func TestH2AbuseEndsConnection(t *testing.T) {
	t.Parallel()
	// requests sends 300 requests, each followed by then(id).
	requests := func(path string, then func(fr *http2.Framer, id uint32) error) func(*http2.Framer) error {
		return func(fr *http2.Framer) error {
			for id := uint32(1); id < 600; id += 2 {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h2Block("GET", path), EndStream: true, EndHeaders: true})
				if err := then(fr, id); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// repeat sends first (if any), then n frames of send.
	repeat := func(n int, first func(fr *http2.Framer), send func(fr *http2.Framer, i int) error) func(*http2.Framer) error {
		return func(fr *http2.Framer) error {
			if first != nil {
				first(fr)
			}
			for i := range n {
				if err := send(fr, i); err != nil {
					return err
				}
			}
			return nil
		}
	}
	abuses := []struct {
		name   string
		banned bool // by one connection
		send   func(fr *http2.Framer) error
	}{
		// The requests take 500 ms, so none completes before its reset arrives even
		// under the race detector (a reset of a completed stream is no abuse).
		{"rapid reset", true, requests("/slow?ms=500", func(fr *http2.Framer, id uint32) error {
			return fr.WriteRSTStream(id, http2.ErrCodeCancel)
		})},
		{"window update 0", true, requests("/slow?ms=500", func(fr *http2.Framer, id uint32) error {
			return fr.WriteWindowUpdate(id, 0)
		})},
		{"data after end stream", true, requests("/slow?ms=500", func(fr *http2.Framer, id uint32) error {
			return fr.WriteData(id, false, []byte("x"))
		})},
		{"self-dependent priority", true, requests("/slow?ms=500", func(fr *http2.Framer, id uint32) error {
			return fr.WritePriority(id, http2.PriorityParam{StreamDep: id, Weight: 1})
		})},
		{"empty continuation", false, repeat(100, func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h2Block("GET", "/"), EndStream: true})
		}, func(fr *http2.Framer, _ int) error { return fr.WriteContinuation(1, false, nil) })},
		// Closed at the first block (TestH2HPACKBomb), charged as the floods are.
		{"hpack bomb", false, func(fr *http2.Framer) error { return h2Bomb(fr, 2000) }},
		{"ping flood", false, repeat(300, nil, func(fr *http2.Framer, i int) error { return fr.WritePing(false, [8]byte{byte(i)}) })},
		{"settings flood", false, repeat(300, nil, func(fr *http2.Framer, _ int) error { return fr.WriteSettings() })},
		{"empty data", false, repeat(300, func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h2Block("POST", "/"), EndHeaders: true})
		}, func(fr *http2.Framer, _ int) error { return fr.WriteData(1, false, nil) })},
	}
	for _, a := range abuses {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			e := startEdge(t, nil)
			conn, fr := h2Dial(t, e.Addr().String())
			fr.AllowIllegalWrites = true
			a.send(fr) // fails once the edge closes the connection: that is the point
			// GOAWAY is sent where possible: beside the server's own writes, within
			// 100 ms, and a reset of the connection may overtake it.
			calm := h2ReadToEnd(t, conn, fr)
			t.Logf("GOAWAY ENHANCE_YOUR_CALM received: %v", calm)
			if got := e.box.Banned(loopback); got != a.banned {
				t.Errorf("banned after one connection = %v, want %v", got, a.banned)
			}
			if a.banned {
				return
			}
			// The source is charged: repeated attempts are banned.
			for i := 0; i < 10 && !e.box.Banned(loopback); i++ {
				conn, fr := h2Dial(t, e.Addr().String())
				fr.AllowIllegalWrites = true
				a.send(fr)
				h2ReadToEnd(t, conn, fr)
			}
			if !e.box.Banned(loopback) {
				t.Error("not banned after 10 abusive connections")
			}
		})
	}
}

// h2Bomb writes a request with one 4 KB field, which enters the dynamic table (index
// 62), then n blocks of 96 one-byte references to it: each decodes to 384 KB, past
// the parse limit, and Go's HTTP/2 server would answer it 431 itself, unseen by the
// chain. One encoder writes them all, so that no other field enters the table.
func h2Bomb(fr *http2.Framer, n int) error {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	block := func(extra ...hpack.HeaderField) []byte {
		buf.Reset()
		for _, f := range append([]hpack.HeaderField{
			{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "127.0.0.1"}, {Name: ":path", Value: "/"},
		}, extra...) {
			enc.WriteField(f)
		}
		return buf.Bytes()
	}
	bomb := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(bomb), EndStream: true, EndHeaders: true})
	refs := bytes.Repeat([]byte{0x80 | 62}, 96)
	for i := range n {
		b := append(block(), refs...)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(3 + 2*i), BlockFragment: b, EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
	}
	return nil
}

// TestH2HPACKBomb: the edge closes an HPACK bomb's connection at its first bomb block,
// before Go's HTTP/2 server decodes it (no 431 comes back), and bans the source on a
// repeat. It used to answer hundreds of them, 384 KB decoded each, until the unseen
// stream bound (2 × max_streams_per_connection + 100) closed the connection.
func TestH2HPACKBomb(t *testing.T) {
	t.Parallel()
	e := startEdge(t, nil)
	for attempt := 1; !e.box.Banned(loopback); attempt++ {
		if attempt > 10 {
			t.Fatal("not banned after 10 bomb connections")
		}
		conn, fr := h2Dial(t, e.Addr().String())
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		done := make(chan struct{})
		go func() {
			defer close(done)
			h2Bomb(fr, 50) // fails once the edge closes the connection
		}()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		statuses := map[string]int{}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
					t.Fatalf("attempt %d: the bomb's connection is still open after 5 s (answers %v)", attempt, statuses)
				}
				break
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok {
				statuses[h.PseudoValue("status")]++
			}
		}
		conn.Close()
		<-done
		if statuses["431"] > 0 {
			t.Fatalf("attempt %d: %d bomb blocks answered 431: the server decoded them (answers %v)", attempt, statuses["431"], statuses)
		}
	}
}

// TestH2ResetsOfCompletedStreams: a client that cancels streams but completes more
// than it cancels (a browser navigating away) keeps its connection.
func TestH2ResetsOfCompletedStreams(t *testing.T) {
	t.Parallel()
	e := startEdge(t, nil)
	conn, fr := h2Dial(t, e.Addr().String())
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	id := uint32(1)
	// 150 requests read to their end, then 150 reset at once.
	for range 150 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h2Block("GET", "/"), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		for ended := false; !ended; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("stream %d: %v", id, err)
			}
			switch f := f.(type) {
			case *http2.DataFrame:
				ended = f.StreamID == id && f.StreamEnded()
			case *http2.MetaHeadersFrame:
				ended = f.StreamID == id && f.StreamEnded()
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			}
		}
		id += 2
	}
	for range 150 {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h2Block("GET", "/slow?ms=100"), EndStream: true, EndHeaders: true})
		fr.WriteRSTStream(id, http2.ErrCodeCancel)
		id += 2
	}
	if err := fr.WritePing(false, [8]byte{7}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			break
		}
	}
	if e.box.Banned(loopback) {
		t.Error("the source is banned")
	}
}

// TestBodyReadTimeout: a request body sent one byte per 200 ms (less than a KiB per
// body_read_timeout) gets 408 once body_read_timeout has passed, on HTTP/1.1 and
// HTTP/2; a body sent at once gets its answer.
func TestBodyReadTimeout(t *testing.T) {
	t.Parallel()
	const d = time.Second
	e := startEdge(t, func(c *config.Config) { c.Limits.BodyReadTimeout = d })
	t.Run("h1", func(t *testing.T) {
		t.Parallel()
		for _, slow := range []bool{true, false} {
			conn, err := tls.Dial("tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
			if slow {
				trickle(t, 200*time.Millisecond, func(int) error { _, err := conn.Write([]byte("x")); return err })
			} else {
				conn.Write(bytes.Repeat([]byte("x"), 100))
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := http.StatusOK
			if slow {
				want = http.StatusRequestTimeout
			}
			took := time.Since(start)
			if resp.StatusCode != want {
				t.Errorf("slow %v: status %d, want %d", slow, resp.StatusCode, want)
			}
			if slow && (took < d || took > d+2*time.Second) {
				t.Errorf("408 after %v, want within 2 s after %v", took, d)
			}
		}
		// The slow body charged its source a rejection, after its 408.
		testkit.WaitFor(t, 5*time.Second, "the slow body's source to be charged", func() bool {
			return e.box.Stats().Rejections >= 1
		})
	})
	t.Run("h2", func(t *testing.T) {
		t.Parallel()
		conn, fr := h2Dial(t, e.Addr().String())
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		start := time.Now()
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true,
			BlockFragment: h2Block("POST", "/", hpack.HeaderField{Name: "content-length", Value: "100"})})
		trickle(t, 200*time.Millisecond, func(int) error { return fr.WriteData(1, false, []byte("x")) })
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 1 {
				if st := h.PseudoValue("status"); st != strconv.Itoa(http.StatusRequestTimeout) {
					t.Errorf("status %s, want 408", st)
				}
				if took := time.Since(start); took < d || took > d+2*time.Second {
					t.Errorf("408 after %v, want within 2 s after %v", took, d)
				}
				return
			}
		}
	})
}

// TestBodyReadTimeoutH3: the same over HTTP/3, the body a reader that yields one
// byte per 200 ms.
func TestBodyReadTimeoutH3(t *testing.T) {
	t.Parallel()
	const d = time.Second
	e := startEdge(t, func(c *config.Config) { c.Limits.BodyReadTimeout = d })
	tr := &http3.Transport{TLSClientConfig: insecureTLS.Clone()}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/", &tricklingBody{ctx: ctx, n: 100})
	req.ContentLength = 100
	start := time.Now()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %d, want 408", resp.StatusCode)
	}
	if took := time.Since(start); took < d || took > d+2*time.Second {
		t.Errorf("408 after %v, want within 2 s after %v", took, d)
	}
}

// tricklingBody yields n bytes, one per 200 ms, until its context ends.
type tricklingBody struct {
	ctx context.Context
	n   int
}

func (b *tricklingBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.EOF
	}
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	case <-t.C:
	}
	b.n--
	p[0] = 'x'
	return 1, nil
}

// TestWriteTimeout: a client that asks for 64 MB and reads nothing has its
// connection reset once a write has made no progress for write_timeout, and what the
// kernel held for it is dropped.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const d = time.Second
	e := startEdge(t, func(c *config.Config) { c.Limits.WriteTimeout = d })
	readSlowlyH1(t, e.Addr().String(), "/bytes?n=67108864", d+2*time.Second)
	// Charged before the reset the client read, writeTimeoutCharge rejections: a
	// source more than five of whose connections end so within abuse.within is
	// banned (h2guard's write.go).
	if got := e.box.Stats().Rejections; got != writeTimeoutCharge {
		t.Errorf("the write timeout charged the source %d rejections, want %d", got, writeTimeoutCharge)
	}
}

// readSlowlyH1 asks addr over HTTP/1.1 for path's 64 MiB response with a 4 KiB
// receive buffer, reads nothing for idle (a write timeout and a margin), then reads
// what there is: the edge must have cut the connection, not sent it all or kept it.
func readSlowlyH1(t *testing.T, addr, path string, idle time.Duration) {
	t.Helper()
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := tls.DialWithDialer(&dialer, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path)
	timer := time.NewTimer(idle)
	<-timer.C
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("still open 10 s after the client began reading (%d bytes read)", n)
	}
	if n >= 64<<20 {
		t.Errorf("read all %d bytes: the connection was not cut", n)
	}
	t.Logf("read %d bytes before the connection was cut (%v)", n, err)
}

// TestH3StalledStreamsCharged: request streams that never send HEADERS are charged
// to the source's stream budget when accepted, so a source opening them without end
// is refused past its burst and banned.
func TestH3StalledStreamsCharged(t *testing.T) {
	t.Parallel()
	e := startEdge(t, func(c *config.Config) {
		c.IP.Streams = config.Rate{Rate: 1, Burst: 20}
		c.Abuse.Rejections = 10
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	for range 60 {
		str, err := conn.OpenStreamSync(ctx)
		if err != nil {
			break // the connection was closed: the ban
		}
		str.Write([]byte{0x01}) // the type of a HEADERS frame, and no more
	}
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		t.Fatal("the connection is still open")
	}
	if !e.box.Banned(loopback) {
		t.Error("the source is not banned")
	}
}

// TestPendingCap: over limits.max_pending_connections the connection pending longest
// (here: TLS done, no request yet) is shed for a new one, and a connection whose
// request has reached the chain is no longer pending, so it is never the one shed —
// the wiring of admission's caps through ConnContext and the stream budget.
func TestPendingCap(t *testing.T) {
	t.Parallel()
	e := startEdge(t, func(c *config.Config) { c.Limits.MaxPendingConnections = 2 })
	tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
	dial := func() *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp", e.Addr().String(), tc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// get sends a request on c and reads its response.
	get := func(c *tls.Conn) error {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	served := dial()
	if err := get(served); err != nil {
		t.Fatal(err)
	}
	idle := dial() // pending: TLS done, no request
	for range 3 {  // each new one pending; past 2, the oldest pending is shed
		dial()
	}
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte on a connection that sent no request")
	} else if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatal("the pending connection longest waiting was not shed")
	}
	if err := get(served); err != nil {
		t.Fatalf("a connection past its first request was shed: %v", err)
	}
}

// TestPendingShedBans: connections that never bring a request, shed by the pending
// cap, charge their source a rejection each (package admission's slow.go), so a
// slowloris source is banned past abuse.rejections and from then on held at accept,
// before any TLS work; a client whose connection brought a request is not charged.
// Before the charge, such a source handshook again and again without end.
func TestPendingShedBans(t *testing.T) {
	t.Parallel()
	e := startEdge(t, func(c *config.Config) {
		c.Limits.MaxPendingConnections = 2
		c.Abuse.Rejections = 3
	})
	legit := clientFor(t, "h1")
	get := func() error {
		resp, err := legit.Get(e.url + "/")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	src := net.IPv4(127, 0, 0, 9)
	slow := netip.MustParseAddr(src.String())
	dials := 0
	for ; dials < 20 && !e.box.Banned(slow); dials++ {
		c, err := tlsFrom(e.Addr().String(), src, "http/1.1") // and no request
		if err != nil {
			continue // reset: shed or banned before its handshake completed
		}
		t.Cleanup(func() { c.Close() })
	}
	if !e.box.Banned(slow) {
		t.Fatalf("%d connections without a request, each past the pending cap of 2: the source is not banned", dials)
	}
	if dials > 8 {
		t.Errorf("banned after %d connections, want ~6 (4 sheds > abuse.rejections 3)", dials)
	}
	// Banned: its connection is held unanswered (package admission's tarpit).
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 300 * time.Millisecond}
	if c, err := tls.DialWithDialer(&d, "tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true}); err == nil {
		c.Close()
		t.Error("a banned source's TLS handshake completed")
	}
	if err := get(); err != nil {
		t.Errorf("the client that brought requests: %v", err)
	}
	if e.box.Banned(loopback) {
		t.Error("the client that brought requests is banned")
	}
}
