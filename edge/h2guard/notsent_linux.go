package h2guard

import (
	"net"
	"syscall"
)

// tcpNotSentLowat is Linux's TCP_NOTSENT_LOWAT socket option (linux/tcp.h), which
// the syscall package does not name.
const tcpNotSentLowat = 25

// limitUnsent bounds what the kernel queues unsent on an accepted TCP connection to
// NotSentLimit: a write waits while more than that is queued. Without it a client that
// stops reading lets h3edge encrypt and queue megabytes for it (send buffers grow to
// net.ipv4.tcp_wmem's maximum, 4 MiB by default) before write_timeout can see no
// progress: 1 000 slow readers cost seconds of CPU and that much kernel memory. Data
// in flight (the congestion window) is not limited, so throughput is not either. A
// failure is ignored: the option only makes slow readers cheaper.
func limitUnsent(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, NotSentLimit)
	})
}
