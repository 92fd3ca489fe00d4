//go:build !unix

package upstream

import (
	"errors"
	"net"
	"os"
	"time"
)

// newPeek returns the check that nothing waits to be read on idle connection nc and
// the peer has not closed it. Without MSG_PEEK|MSG_DONTWAIT it reads for a
// millisecond: a timeout says idle; anything read (data or the end) makes the
// connection unusable.
func newPeek(nc net.Conn) func() (idle bool, err error) {
	return func() (bool, error) {
		nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [1]byte
		_, err := nc.Read(b[:])
		nc.SetReadDeadline(time.Time{})
		return errors.Is(err, os.ErrDeadlineExceeded), nil
	}
}
