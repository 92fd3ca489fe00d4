package edge

import (
	"crypto/tls"
	"net"
	"net/netip"
	"time"
)

// The header read timeout (readHeaderTimeout) on every protocol: a request whose header
// section is not complete within it is ended. HTTP/1.1 has net/http's ReadHeaderTimeout.
// Go's HTTP/2 server bounds only the first request that way, so h2HeaderGuard watches the
// frames on the connection. HTTP/3 streams get a read deadline before quic-go reads their
// HEADERS frame (h3Serve). The same guard counts the frames of HTTP/2 abuse
// (h2abuse.go).

// HTTP/2 frame types and flags the guard reads (RFC 9113 §6).
const (
	h2FrameHeaders      = 0x1
	h2FrameContinuation = 0x9
	h2FlagEndHeaders    = 0x4
	h2FrameHeaderLen    = 9
	h2PrefaceLen        = 24 // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// headerGuardListener hands the HTTP server TLS connections that end an HTTP/2 header
// section still incomplete after timeout, and end abusive HTTP/2 connections,
// charging their source through report.
type headerGuardListener struct {
	net.Listener // yields *tls.Conn
	timeout      time.Duration
	report       func(addr netip.Addr, charge int, reason string)
	// writeTimeout returns limits.write_timeout in force (limits.go); nil: none.
	writeTimeout func() time.Duration
	// maxUnseen bounds the streams a connection may open that the chain does not
	// see (h2abuse.go); zero: not bounded.
	maxUnseen int64
}

func (l headerGuardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return c, nil
	}
	g := &h2HeaderGuard{Conn: tc, timeout: l.timeout, skip: h2PrefaceLen}
	g.abuse.report = l.report
	g.writeTimeout = l.writeTimeout
	g.abuse.maxUnseen = l.maxUnseen
	return g, nil
}

// h2HeaderGuard is a TLS connection that follows the HTTP/2 frames read from it: from
// the first byte of a HEADERS frame to the end of the frame that carries END_HEADERS,
// a header section is pending, and the connection's read deadline is when it started
// plus timeout; past it the read fails and the HTTP/2 server closes the connection.
// Go's HTTP/2 server sets no read deadline of its own (it keeps its timeouts in
// timers), so the deadline is the guard's. It costs a few comparisons per frame and
// two deadline changes per header section; on HTTP/1.1 (ALPN not h2) it only passes
// reads through. Its methods are called by the one goroutine that reads the
// connection, as net.Conn's Read is.
type h2HeaderGuard struct {
	*tls.Conn
	timeout time.Duration

	state   int8 // 0: ALPN not checked yet; 1: HTTP/2; -1: not HTTP/2
	pending bool // a header section has begun and not ended
	armed   bool // the read deadline is set for it
	ends    bool // the frame being skipped ends the header section
	skip    int  // bytes left of the preface or of the current frame's payload
	nhdr    int  // bytes of the frame header read so far
	hdr     [h2FrameHeaderLen]byte
	abuse   h2Abuse

	// writeTimeout is limits.write_timeout, read per write (a reload changes it);
	// wdl is the write deadline in force and wrote what was written since it was set.
	writeTimeout func() time.Duration
	wdl          time.Time
	wrote        int
}

// Write writes to the TLS connection under limits.write_timeout: the connection must
// take writePiece bytes within each write_timeout while writes are waiting, or the
// write fails and the HTTP server closes the connection — a client that reads slower
// than 16 KiB per write_timeout (273 B/s at the default 60 s), or not at all. The
// deadline moves on once writePiece bytes have gone since it was set (so writes of a
// few KiB each, net/http's buffer, do not each buy a full timeout), and is set afresh
// when a write starts after it passed while nothing was written (an idle connection).
// Writes come from one goroutine at a time (the HTTP/1.1 connection's, or HTTP/2's
// writer; the abuse GOAWAY bypasses this method). A write that times out makes the
// close a reset.
func (c *h2HeaderGuard) Write(p []byte) (int, error) {
	var d time.Duration
	if c.writeTimeout != nil {
		d = c.writeTimeout()
	}
	if d <= 0 {
		return c.Conn.Write(p)
	}
	n := 0
	for len(p) > 0 {
		k := min(len(p), writePiece)
		if now := time.Now(); c.wrote >= writePiece || now.After(c.wdl) {
			c.wdl, c.wrote = now.Add(d), 0
			c.Conn.SetWriteDeadline(c.wdl)
		}
		m, err := c.Conn.Write(p[:k])
		n += m
		c.wrote += m
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				// Drop what the kernel still holds for this client: a close would
				// queue the FIN behind what the client reads at its trickle.
				if tc, ok := c.NetConn().(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
			}
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// writePiece is the most Write sends under one deadline: the progress a client must
// make per write_timeout.
const writePiece = 16 << 10

// Read reads from the TLS connection and follows the frames it returns.
func (c *h2HeaderGuard) Read(p []byte) (int, error) {
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
	switch pending := c.pending || c.nhdr > 0; {
	case pending && !c.armed:
		c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
		c.armed = true
	case !pending && c.armed:
		c.Conn.SetReadDeadline(time.Time{})
		c.armed = false
	}
	if c.abuse.closed {
		return 0, errH2Abuse
	}
	n, err := c.Conn.Read(p)
	c.follow(p[:n])
	if c.abuse.abused != "" {
		return 0, c.endAbuse()
	}
	return n, err
}

// follow advances the frame state over b, the bytes just read.
func (c *h2HeaderGuard) follow(b []byte) {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			if c.abuse.want > 0 {
				c.abuse.capture(b[:k])
			}
			c.skip -= k
			b = b[k:]
			if c.skip == 0 && c.ends {
				c.pending, c.ends = false, false
			}
			continue
		}
		k := copy(c.hdr[c.nhdr:], b)
		c.nhdr += k
		b = b[k:]
		if c.nhdr < h2FrameHeaderLen {
			return
		}
		c.nhdr = 0
		typ, flags := c.hdr[3], c.hdr[4]
		if typ == h2FrameHeaders {
			c.pending = true
		}
		c.ends = (typ == h2FrameHeaders || typ == h2FrameContinuation) && flags&h2FlagEndHeaders != 0
		c.skip = int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
		c.abuse.frame(typ, flags, c.skip, uint32(c.hdr[5]&0x7f)<<24|uint32(c.hdr[6])<<16|uint32(c.hdr[7])<<8|uint32(c.hdr[8]))
		if c.skip == 0 && c.ends {
			c.pending, c.ends = false, false
		}
	}
}
