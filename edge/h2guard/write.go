package h2guard

import (
	"net"
	"net/netip"
	"time"
)

// Write writes to the TLS connection under the write timeout: the connection must
// take writePiece bytes within each timeout while writes are waiting, or the write
// fails and the HTTP server closes the connection — a client that reads slower than
// 16 KiB per timeout (273 B/s at 60 s), or not at all. The deadline moves on once
// writePiece bytes have gone since it was set (so writes of a few KiB each, net/http's
// buffer, do not each buy a full timeout), and is set afresh when a write starts after
// it passed while nothing was written (an idle connection). Writes come from one
// goroutine at a time (the HTTP/1.1 connection's, or HTTP/2's writer; the abuse GOAWAY
// bypasses this method). A write that times out makes the close a reset, and charges
// the source through Config.Slow (the edge charges ten rejections: more than five
// such connections within abuse.within ban the source): a client that stops reading
// is ended at no cost to it, so a source whose connections keep ending so is banned —
// one client keeps a few connections to a host, ip.max_connections caps a source at 64.
func (c *Conn) Write(p []byte) (int, error) {
	if c.abuse.report != nil {
		c.followWrite(p)
	}
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
				c.chargeWriteTimeout()
			}
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// writePiece is the most Write sends under one deadline: the progress a client must
// make per write timeout.
const writePiece = 16 << 10

// ReasonWriteTimeout is the reason Config.Slow is given for a write timeout.
const ReasonWriteTimeout = "write timeout"

// chargeWriteTimeout charges the source of the connection for its write timeout,
// once.
func (c *Conn) chargeWriteTimeout() {
	if c.slow == nil || c.writeCharged {
		return
	}
	c.writeCharged = true
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		c.slow(ap.Addr().Unmap(), ReasonWriteTimeout)
	}
}

// followWrite follows the frames the server writes (p: the bytes of one Write), for
// the abuse guard (abuse.wrote). On a connection that is not HTTP/2 it does nothing.
func (c *Conn) followWrite(p []byte) {
	if c.wstate == 0 {
		c.wstate = -1
		if c.ConnectionState().NegotiatedProtocol == "h2" {
			c.wstate = 1
		}
	}
	if c.wstate < 0 {
		return
	}
	for len(p) > 0 {
		if c.wskip > 0 {
			k := min(c.wskip, len(p))
			c.wskip -= k
			p = p[k:]
			continue
		}
		var whole bool
		if p, whole = c.whdr.fill(p); !whole {
			return
		}
		c.wskip = c.whdr.length()
		c.abuse.wrote(c.whdr.b[3], c.whdr.b[4], c.whdr.stream())
	}
}
