//go:build unix

package upstream

import (
	"net"
	"syscall"
)

// newPeek returns the check that nothing waits to be read on idle connection nc and
// the peer has not closed it: a recv with MSG_PEEK|MSG_DONTWAIT that would block. A
// deadline in the past cannot ask this (Go fails the read before its system call),
// and one in the future would wait for it. Made once per connection, so that a check
// allocates nothing (BenchmarkPeekIdle).
func newPeek(nc net.Conn) func() (idle bool, err error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return func() (bool, error) { return false, nil }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() (bool, error) { return false, nil }
	}
	var idle bool
	try := func(fd uintptr) bool {
		err := recvPeek(fd)
		idle = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait: the answer is now
	}
	return func() (bool, error) {
		idle = false
		err := rc.Read(try) // fails without a system call if nc's read deadline passed
		return idle, err
	}
}
