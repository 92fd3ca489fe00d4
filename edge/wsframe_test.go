package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// wsClient is the client side of a WebSocket carried by an extended CONNECT (RFC 8441
// on HTTP/2, RFC 9220 on HTTP/3): RFC 6455 frames on the request and response bodies,
// with no handshake of its own — text messages, masked as a client's must be, and the
// close frame. Just enough to talk to a real WebSocket server through the edge.
type wsClient struct {
	Resp *http.Response
	out  io.WriteCloser
	in   *bufio.Reader
}

// wsDial opens a WebSocket to rawURL (https://host:port/path) over proto ("h2" or
// "h3") with an extended CONNECT. A refusal is no error: Resp says what came back,
// and the client is nil unless the status is 200.
func wsDial(ctx context.Context, t testing.TB, proto, rawURL string) (*wsClient, *http.Response, error) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{"Sec-Websocket-Version": {"13"}, "Origin": {"https://" + u.Host}}
	var resp *http.Response
	var out io.WriteCloser
	switch proto {
	case "h2":
		// net/http's client refuses a :protocol field (Transport.roundTrip validates
		// the names before its HTTP/2 side sees them): frames, then.
		resp, out, err = h2Connect(ctx, t, u, hdr)
	case "h3":
		pr, pw := io.Pipe()
		req := (&http.Request{Method: http.MethodConnect, URL: u, Host: u.Host, Proto: "websocket",
			Body: pr, ContentLength: -1, Header: hdr}).WithContext(ctx)
		resp, err = clientFor(t, proto).Transport.RoundTrip(req)
		out = pw
	default:
		t.Fatalf("no extended CONNECT on %s", proto)
	}
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		out.Close()
		return nil, resp, nil
	}
	return &wsClient{Resp: resp, out: out, in: bufio.NewReader(resp.Body)}, resp, nil
}

// h2Connect sends an extended CONNECT for WebSocket on a new HTTP/2 connection, once
// the server's SETTINGS allow it (RFC 8441 §3), and returns the response, whose body
// is the stream's DATA, and the stream's writing side (Close ends the stream).
func h2Connect(ctx context.Context, t testing.TB, u *url.URL, hdr http.Header) (*http.Response, io.WriteCloser, error) {
	conn, fr := h2Dial(t, u.Host)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, nil, err
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if v, ok := sf.Value(http2.SettingEnableConnectProtocol); !ok || v != 1 {
				return nil, nil, errors.New("the server's SETTINGS do not enable extended CONNECT")
			}
			break
		}
	}
	st := &h2Stream{fr: fr}
	st.mu.Lock()
	fr.WriteSettingsAck()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "CONNECT"}, {":protocol", "websocket"}, {":scheme", "https"},
		{":path", u.RequestURI()}, {":authority", u.Host}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for k, vs := range hdr {
		for _, v := range vs {
			enc.WriteField(hpack.HeaderField{Name: strings.ToLower(k), Value: v})
		}
	}
	err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true})
	st.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	pr, pw := io.Pipe()
	got := make(chan *http.Response, 1)
	go st.readLoop(pw, pr, got, stop)
	select {
	case resp := <-got:
		if resp == nil {
			_, err := pr.Read(nil)
			return nil, nil, fmt.Errorf("no response: %v", err)
		}
		return resp, st, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// h2Stream is stream 1 of a client's HTTP/2 connection.
type h2Stream struct {
	mu sync.Mutex // guards writes on fr
	fr *http2.Framer
}

// readLoop reads the connection's frames: the response's HEADERS go to got, its DATA
// into pw (granting the window back at once), END_STREAM or a reset end pw.
func (st *h2Stream) readLoop(pw *io.PipeWriter, pr *io.PipeReader, got chan<- *http.Response, stop func() bool) {
	defer stop()
	sent := false
	fail := func(err error) {
		pw.CloseWithError(err)
		if !sent {
			close(got)
		}
	}
	for {
		f, err := st.fr.ReadFrame()
		if err != nil {
			fail(err)
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				st.mu.Lock()
				st.fr.WriteSettingsAck()
				st.mu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				st.mu.Lock()
				st.fr.WritePing(true, f.Data)
				st.mu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			if !sent {
				code, _ := strconv.Atoi(f.PseudoValue("status"))
				h := http.Header{}
				for _, hf := range f.RegularFields() {
					h.Add(hf.Name, hf.Value)
				}
				sent = true
				got <- &http.Response{StatusCode: code, Header: h, Body: pr, ProtoMajor: 2}
			}
			if f.StreamEnded() {
				pw.Close()
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				pw.Write(f.Data())
				st.mu.Lock()
				st.fr.WriteWindowUpdate(0, uint32(n))
				st.fr.WriteWindowUpdate(1, uint32(n))
				st.mu.Unlock()
			}
			if f.StreamEnded() {
				pw.Close()
			}
		case *http2.RSTStreamFrame:
			fail(fmt.Errorf("stream reset: %v", f.ErrCode))
		case *http2.GoAwayFrame:
			fail(fmt.Errorf("GOAWAY: %v", f.ErrCode))
		}
	}
}

// Write sends p as one DATA frame.
func (st *h2Stream) Write(p []byte) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.fr.WriteData(1, false, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the stream's sending side.
func (st *h2Stream) Close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.fr.WriteData(1, true, nil)
}

// Send writes msg as one masked text frame.
func (c *wsClient) Send(msg []byte) error {
	return c.frame(0x1, msg)
}

// Close sends a close frame and ends the request body.
func (c *wsClient) Close() {
	c.frame(0x8, []byte{0x03, 0xe8}) // 1000, normal closure
	c.out.Close()
	c.Resp.Body.Close()
}

func (c *wsClient) frame(opcode byte, payload []byte) error {
	hdr := []byte{0x80 | opcode}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 1<<16:
		hdr = append(hdr, 0x80|126)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	var mask [4]byte
	rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	masked := make([]byte, len(payload))
	for i, b := range payload {
		masked[i] = b ^ mask[i%4]
	}
	_, err := c.out.Write(append(hdr, masked...))
	return err
}

// errWSClosed is Recv's error for the server's close frame.
var errWSClosed = errors.New("websocket: closed by the server")

// Recv reads the next data frame's payload (a server's frames are not masked).
func (c *wsClient) Recv() ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(c.in, h[:]); err != nil {
		return nil, err
	}
	if h[1]&0x80 != 0 {
		return nil, errors.New("websocket: a server frame is masked")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(c.in, b[:]); err != nil {
			return nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(c.in, b[:]); err != nil {
			return nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 1<<20 {
		return nil, fmt.Errorf("websocket: a %d-byte frame", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.in, p); err != nil {
		return nil, err
	}
	if h[0]&0x0f == 0x8 {
		return p, errWSClosed
	}
	return p, nil
}
