package attack

import (
	"context"
	"net"
	"syscall"
	"unsafe"
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
// it sent: a slow reader holds data in its buffers, which stays readable after a
// reset, and would otherwise see the end only once it has read its way there, seconds
// later. It reads the connection's TCP state (TCP_INFO's first byte, tcpi_state).
func peerGone(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	rc.Control(func(fd uintptr) {
		var info [8]byte
		n := uint32(len(info))
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
		gone = e == 0 && info[0] != tcpEstablished
	})
	return gone
}

// tcpEstablished is TCP_ESTABLISHED, the state of tcpi_state while the connection is up.
const tcpEstablished = 1
