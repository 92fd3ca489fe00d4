package h2guard

import (
	"net"
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
// bypasses this method). A write that times out makes the close a reset.
func (c *Conn) Write(p []byte) (int, error) {
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
// make per write timeout.
const writePiece = 16 << 10
