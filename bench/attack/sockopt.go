package attack

import (
	"context"
	"net"
	"syscall"
)

// setRcvBuf returns a dialer control function that shrinks the socket's receive
// buffer before connecting, so a slow reader's window is small from the start.
func setRcvBuf(n int) func(ctx context.Context, network, address string, c syscall.RawConn) error {
	return func(_ context.Context, _, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// peerGone reports whether the server has reset or finished c, without reading what
// it sent: a slow reader holds a TLS record or more of data in its buffers and would
// otherwise see the end only once it has read its way there, seconds later.
func peerGone(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	var b [1]byte
	rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = err == syscall.ECONNRESET || err == nil && n == 0
		return true
	})
	return gone
}
