package attack

import (
	"context"
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
