package upstream

import (
	"syscall"
	"unsafe"
)

// recvPeek peeks at one byte of socket fd without waiting. The raw system call, as
// syscall.Recvfrom would allocate the sender's address it returns (112 B per call).
func recvPeek(fd uintptr) error {
	var b [1]byte
	_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
