package quicconn

import (
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
)

// Socket is a UDP socket that drops the datagrams of banned sources before quic-go sees
// them: no parsing, no crypto, no state. Give it to quic.Transport.Conn.
//
// It embeds the *net.UDPConn, so it is a quic.OOBCapablePacketConn and quic-go keeps its
// fast path (batched reads, GSO, ECN, DF for path-MTU discovery, packet info), and it
// implements ReadBatch, which quic-go prefers to reading the raw socket itself: that is
// where the filter runs. Filtering only in ReadFrom and ReadMsgUDP would not run at all
// on Linux, where quic-go reads in batches; they filter too, for other readers.
//
// One Socket serves IPv4, IPv6 and dual-stack sockets alike: quic-go reads every UDP
// socket through ipv4.Message batches (ipv4.Message and ipv6.Message are the same type,
// and the source address is decoded by its own family), and so does Socket.
//
// Reading the file descriptor directly (SyscallConn) bypasses the filter; quic-go uses
// it only for socket options.
type Socket struct {
	*net.UDPConn
	g  *Guard
	br batchReader
}

type batchReader interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
}

// WrapConn returns c behind g's datagram filter. Socket counts drops in g's Stats.
// The kernel filter set by SetKernelBans, if any, is attached to c too.
func (g *Guard) WrapConn(c *net.UDPConn) *Socket {
	s := &Socket{UDPConn: c, g: g, br: ipv4.NewPacketConn(c)}
	g.register(s)
	return s
}

// ReadBatch reads a batch of datagrams like ipv4.PacketConn.ReadBatch and compacts away
// those from banned sources: the datagram kept in slot k is copied into slot k's own
// buffers (quic-go ties each slot's buffer to its own pool entry, so slices are never
// swapped). When a whole batch is dropped it reads again, so it never returns (0, nil).
func (s *Socket) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	for {
		n, err := s.br.ReadBatch(ms, flags)
		if err != nil {
			return n, err // quic-go looks at no message when err is set
		}
		if k := s.filter(ms[:n]); k > 0 {
			return k, nil
		}
	}
}

// filter compacts ms, keeping the datagrams whose source is not banned, and returns how
// many it kept.
func (s *Socket) filter(ms []ipv4.Message) int {
	banned := s.g.cfg.Banned
	if banned == nil {
		return len(ms)
	}
	k := 0
	var last netip.Addr
	var lastBanned bool
	for i := range ms {
		a, _ := addrOf(ms[i].Addr)
		if i == 0 || a != last {
			last, lastBanned = a, banned(a)
		}
		if lastBanned {
			continue
		}
		if k != i {
			move(&ms[k], &ms[i])
		}
		k++
	}
	if d := len(ms) - k; d > 0 {
		s.g.dropped.Add(uint64(d))
	}
	return k
}

// move copies src's datagram, control data, address and flags into dst's own buffers.
func move(dst, src *ipv4.Message) {
	dst.N = copyBuffers(dst.Buffers, src.Buffers, src.N)
	dst.NN = copy(dst.OOB, src.OOB[:min(src.NN, len(src.OOB))])
	dst.Addr, dst.Flags = src.Addr, src.Flags
}

// copyBuffers copies the first n bytes scattered over src into dst, and returns the
// number of bytes copied.
func copyBuffers(dst, src [][]byte, n int) int {
	if len(dst) == 1 && len(src) == 1 {
		return copy(dst[0], src[0][:min(n, len(src[0]))])
	}
	copied, d, off := 0, 0, 0
	for _, b := range src {
		b = b[:min(len(b), n-copied)]
		for len(b) > 0 && d < len(dst) {
			c := copy(dst[d][off:], b)
			b, off, copied = b[c:], off+c, copied+c
			if off == len(dst[d]) {
				d, off = d+1, 0
			}
		}
		if copied == n || d == len(dst) {
			break
		}
	}
	return copied
}

// drop reports whether a datagram from addr is to be dropped, and counts it.
func (s *Socket) drop(addr netip.Addr) bool {
	if s.g.cfg.Banned == nil || !s.g.cfg.Banned(addr.Unmap()) {
		return false
	}
	s.g.dropped.Add(1)
	return true
}

// ReadFrom is net.PacketConn.ReadFrom, skipping datagrams from banned sources.
func (s *Socket) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := s.UDPConn.ReadFromUDPAddrPort(b)
		if err != nil || !s.drop(addr.Addr()) {
			if err != nil {
				return n, nil, err
			}
			return n, net.UDPAddrFromAddrPort(addr), nil
		}
	}
}

// ReadFromUDP is net.UDPConn.ReadFromUDP, skipping datagrams from banned sources.
func (s *Socket) ReadFromUDP(b []byte) (int, *net.UDPAddr, error) {
	for {
		n, addr, err := s.UDPConn.ReadFromUDP(b)
		if err != nil || !s.drop(udpAddr(addr)) {
			return n, addr, err
		}
	}
}

// ReadFromUDPAddrPort is net.UDPConn.ReadFromUDPAddrPort, skipping datagrams from
// banned sources.
func (s *Socket) ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error) {
	for {
		n, addr, err := s.UDPConn.ReadFromUDPAddrPort(b)
		if err != nil || !s.drop(addr.Addr()) {
			return n, addr, err
		}
	}
}

// ReadMsgUDP is net.UDPConn.ReadMsgUDP, skipping datagrams from banned sources.
func (s *Socket) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	for {
		n, oobn, flags, addr, err = s.UDPConn.ReadMsgUDP(b, oob)
		if err != nil || !s.drop(udpAddr(addr)) {
			return n, oobn, flags, addr, err
		}
	}
}

// ReadMsgUDPAddrPort is net.UDPConn.ReadMsgUDPAddrPort, skipping datagrams from banned
// sources.
func (s *Socket) ReadMsgUDPAddrPort(b, oob []byte) (n, oobn, flags int, addr netip.AddrPort, err error) {
	for {
		n, oobn, flags, addr, err = s.UDPConn.ReadMsgUDPAddrPort(b, oob)
		if err != nil || !s.drop(addr.Addr()) {
			return n, oobn, flags, addr, err
		}
	}
}

func udpAddr(a *net.UDPAddr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	ip, _ := netip.AddrFromSlice(a.IP)
	return ip
}
