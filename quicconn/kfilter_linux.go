package quicconn

import (
	"net"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// attachFilter sets prog as c's socket filter (SO_ATTACH_FILTER replaces the previous
// one atomically), or removes the filter when prog is empty.
func attachFilter(c *net.UDPConn, prog []bpf.RawInstruction) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if len(prog) == 0 {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0)
			if serr == unix.ENOENT {
				serr = nil // no filter to remove
			}
			return
		}
		f := make([]unix.SockFilter, len(prog))
		for i, ins := range prog {
			f[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
		}
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
			&unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]})
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return &net.OpError{Op: "setsockopt", Net: "udp", Addr: c.LocalAddr(), Err: serr}
	}
	return nil
}

// skMeminfoDrops is SK_MEMINFO_DROPS, the index of the drop counter in SO_MEMINFO.
const skMeminfoDrops, skMeminfoVars = 8, 9

// socketDrops returns the kernel's count of datagrams dropped on c (sk_drops): by the
// socket filter, and for a full receive buffer. 0 if c is closed.
func socketDrops(c *net.UDPConn) uint64 {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var mem [skMeminfoVars]uint32
	var errno unix.Errno
	if rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(mem))
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
	}) != nil || errno != 0 {
		return 0
	}
	return uint64(mem[skMeminfoDrops])
}
