//go:build unix && !linux

package upstream

import "syscall"

// recvPeek peeks at one byte of socket fd without waiting.
func recvPeek(fd uintptr) error {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err
}
