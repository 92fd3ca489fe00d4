// Package h2guard watches the HTTP/2 frames a TLS connection passes to Go's HTTP/2
// server, which hides them from handlers. It bounds what that server does not:
//
//   - the header read timeout on every request of a connection (Go's HTTP/2 server
//     bounds only the first): a header section not complete within
//     [Config.HeaderTimeout] of its HEADERS frame fails the connection's read;
//   - the write timeout ([Config.WriteTimeout]): a connection whose writes make no
//     progress is reset, on HTTP/1.1 as on HTTP/2;
//   - HTTP/2 abuse (abuse.go): Rapid Reset, MadeYouReset, CONTINUATION floods, HPACK
//     bombs, SETTINGS/PING/empty-frame floods end the connection with GOAWAY
//     ENHANCE_YOUR_CALM and charge the source through [Config.Report].
//
// [NewListener] wraps a TLS listener; the HTTP server's handler goes behind
// [Completions] and its ConnContext through [ConnContext], so that the guard knows
// which streams the handlers saw and completed. [UnsentLimited] bounds the kernel's
// unsent data per TCP connection, below TLS. The package knows nothing of the edge:
// what a charge means is the Report hook's.
package h2guard

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"net/netip"
	"time"
)

// Config says what a guarded connection bounds. Its zero value only follows frames.
type Config struct {
	// HeaderTimeout ends a connection whose HTTP/2 header section is not complete this
	// long after its HEADERS frame began; zero: no header timeout.
	HeaderTimeout time.Duration
	// WriteTimeout returns the write timeout in force, read on each write (so a
	// reload changes it): the connection must take 16 KiB within each such timeout
	// while writes wait, or it is reset. Nil or not positive: no write timeout.
	WriteTimeout func() time.Duration
	// MaxUnseen bounds the streams a connection may open that the handlers do not see
	// (Go's server answers them itself: HPACK bombs, malformed requests), beyond a
	// slack of 100; zero: not bounded. It needs Completions in front of the handler.
	MaxUnseen int64
	// MaxHeaderBytes is the decoded size (HPACK's: name, value and 32 bytes a field)
	// past which a header block decoded from less than a sixteenth of that is an HPACK
	// bomb (bomb.go); zero: no bomb checks. Needs Report.
	MaxHeaderBytes int
	// Report charges the source of a connection ended for abuse with charge
	// rejections, for reason; it is called once per connection, from the goroutine
	// that reads it, after the GOAWAY is sent. Nil: no abuse checks.
	Report func(addr netip.Addr, charge int, reason string)
	// Slow charges the source of a connection the write timeout ended, for reason
	// (write.go; the edge charges ten rejections); it is called once per connection,
	// from the goroutine that writes. Nil: not charged.
	Slow func(addr netip.Addr, reason string)
}

// HTTP/2 frame types and flags the header timeout reads (RFC 9113 §6).
const (
	frameHeaders      = 0x1
	frameContinuation = 0x9
	flagEndHeaders    = 0x4
	frameHeaderLen    = 9
	prefaceLen        = 24 // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// NewListener returns a listener whose TLS connections (ln yields *tls.Conn) are
// guarded by c, as *Conn; other connections pass unwrapped.
func NewListener(ln net.Listener, c Config) net.Listener { return listener{ln, c} }

type listener struct {
	net.Listener
	c Config
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return c, nil
	}
	g := &Conn{Conn: tc, timeout: l.c.HeaderTimeout, skip: prefaceLen, writeTimeout: l.c.WriteTimeout, slow: l.c.Slow}
	g.abuse.report = l.c.Report
	g.abuse.maxUnseen = l.c.MaxUnseen
	if l.c.Report != nil {
		g.bomb.limit = l.c.MaxHeaderBytes
	}
	return g, nil
}

// Conn is a guarded TLS connection. It follows the HTTP/2 frames read from it: from
// the first byte of a HEADERS frame to the end of the frame that carries END_HEADERS,
// a header section is pending, and the connection's read deadline is when it started
// plus the header timeout; past it the read fails and the HTTP/2 server closes the
// connection. Go's HTTP/2 server sets no read deadline of its own (it keeps its
// timeouts in timers), so the deadline is the guard's. It costs a few comparisons per
// frame and two deadline changes per header section; on HTTP/1.1 (ALPN not h2) it only
// passes reads through. Its Read is called by the one goroutine that reads the
// connection, as net.Conn's Read is.
type Conn struct {
	*tls.Conn
	timeout time.Duration

	state   int8      // 0: ALPN not checked yet; 1: HTTP/2; -1: not HTTP/2
	pending bool      // a header section has begun and not ended
	armed   bool      // the read deadline is set for it
	ends    bool      // the frame being skipped ends the header section
	skip    int       // bytes left of the preface or of the current frame's payload
	hdr     frameHead // the frame header being read
	abuse   abuse
	block   bool // the frame being skipped is HEADERS or CONTINUATION
	bomb    bomb

	// writeTimeout is Config.WriteTimeout; wdl is the write deadline in force and
	// wrote what was written since it was set (write.go).
	writeTimeout func() time.Duration
	wdl          time.Time
	wrote        int
	slow         func(addr netip.Addr, reason string) // Config.Slow
	writeCharged bool                                 // the write timeout was charged (by the writing goroutine)

	// The frames the server writes, followed by the writing goroutine (followWrite):
	// wstate as state, wskip as skip, whdr as hdr.
	wstate int8
	wskip  int
	whdr   frameHead
}

// frameHead gathers the 9 bytes of a frame header (RFC 9113 §4.1) across reads or
// writes.
type frameHead struct {
	n int // bytes of it so far
	b [frameHeaderLen]byte
}

// fill takes header bytes from p and returns the rest of p, and whether the header is
// whole; the next fill then begins the next frame's.
func (h *frameHead) fill(p []byte) ([]byte, bool) {
	k := copy(h.b[h.n:], p)
	if h.n += k; h.n < frameHeaderLen {
		return p[k:], false
	}
	h.n = 0
	return p[k:], true
}

func (h *frameHead) length() int    { return int(h.b[0])<<16 | int(h.b[1])<<8 | int(h.b[2]) }
func (h *frameHead) stream() uint32 { return binary.BigEndian.Uint32(h.b[5:]) & 0x7fffffff }

// Raw returns the connection under c (a Conn, a TLS connection, or one as accepted)
// as the listener accepted it.
func Raw(c net.Conn) net.Conn {
	if g, ok := c.(*Conn); ok {
		c = g.Conn
	}
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	return c
}

// Read reads from the TLS connection and follows the frames it returns.
func (c *Conn) Read(p []byte) (int, error) {
	if c.state <= 0 {
		if c.state < 0 {
			return c.Conn.Read(p)
		}
		// Read runs after the handshake: net/http completes it first.
		c.state = -1
		if c.ConnectionState().NegotiatedProtocol == "h2" {
			c.state = 1
		}
		if c.state < 0 {
			return c.Conn.Read(p)
		}
	}
	// A frame header cut short counts as a pending section too: nothing legitimate
	// stops within a frame's 9 header bytes, and its type is not known yet.
	switch pending := (c.pending || c.hdr.n > 0) && c.timeout > 0; {
	case pending && !c.armed:
		c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
		c.armed = true
	case !pending && c.armed:
		c.Conn.SetReadDeadline(time.Time{})
		c.armed = false
	}
	if c.abuse.closed {
		return 0, ErrAbuse
	}
	n, err := c.Conn.Read(p)
	c.follow(p[:n])
	if c.abuse.abused != "" {
		return 0, c.endAbuse()
	}
	return n, err
}

// follow advances the frame state over b, the bytes just read.
func (c *Conn) follow(b []byte) {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			if c.abuse.want > 0 {
				c.abuse.capture(b[:k])
			}
			if c.block {
				c.block = c.follows(b[:k])
			}
			c.skip -= k
			b = b[k:]
			if c.skip == 0 && c.ends {
				c.endSection()
			}
			continue
		}
		var whole bool
		if b, whole = c.hdr.fill(b); !whole {
			return
		}
		typ, flags := c.hdr.b[3], c.hdr.b[4]
		if typ == frameHeaders {
			c.pending = true
		}
		c.ends = (typ == frameHeaders || typ == frameContinuation) && flags&flagEndHeaders != 0
		c.skip = c.hdr.length()
		c.abuse.frame(typ, flags, c.skip, c.hdr.stream())
		c.block = false
		if typ == frameHeaders || typ == frameContinuation {
			c.bomb.frame(typ, flags, c.skip)
			c.block = c.skip > 0
		}
		if c.skip == 0 && c.ends {
			c.endSection()
		}
	}
}

// follows feeds b, payload of a HEADERS or CONTINUATION frame, to the bomb guard and
// reports whether the rest of the frame should be fed too.
func (c *Conn) follows(b []byte) bool {
	c.bomb.payload(b)
	if c.bomb.bombed && c.abuse.report != nil && c.abuse.abused == "" {
		c.abuse.abused = "HPACK bomb"
		return false
	}
	return true
}

// endSection ends the pending header section (END_HEADERS).
func (c *Conn) endSection() {
	c.pending, c.ends = false, false
	c.bomb.end()
}
