package limiter

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
)

// Source is an address cut to a prefix of it: the unit in which per-source budgets,
// rejection counts and bans count clients. It holds the address in 16-byte form, IPv4
// as IPv4-mapped (::ffff:a.b.c.d), a form no unmapped IPv6 address has, so the two
// families never collide; it does not hold the prefix length. Sources are comparable
// and hold no pointers, so they make cheap map keys. The zero Source is "::".
type Source struct{ hi, lo uint64 }

// v4Mapped is the top of an IPv4-mapped address's low word.
const v4Mapped = 0xffff << 32

// AddrSource returns a as a Source, all of its bits kept. An IPv4-mapped IPv6 address
// counts as IPv4; the zero Addr is "::". It allocates nothing.
func AddrSource(a netip.Addr) Source {
	if a.Is4() {
		b := a.As4()
		return Source{0, v4Mapped | uint64(binary.BigEndian.Uint32(b[:]))}
	}
	// An IPv4-mapped address is already in the form IPv4 is kept in. AppendBinary, not
	// As16: As16 makes the compiler copy the array with a 16-byte load that stalls on the
	// two 8-byte stores just made, which doubled the cost of a ban lookup
	// (penalty.Box.Banned runs for every datagram).
	var buf [16]byte
	b, _ := a.WithZone("").AppendBinary(buf[:0])
	if len(b) != 16 {
		return Source{}
	}
	return Source{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// Is4 reports whether s is an IPv4 source.
func (s Source) Is4() bool { return s.hi == 0 && s.lo>>32 == 0xffff }

// Masked returns s with all but its first n bits cleared, n counted within the IPv4
// address for an IPv4 source (0 to 32) and within the IPv6 address otherwise (0 to 128).
func (s Source) Masked(n int) Source {
	if s.Is4() {
		return Source{0, v4Mapped | s.lo&uint64(uint32(math.MaxUint32)<<(32-n))}
	}
	if n >= 64 {
		return Source{s.hi, s.lo & (uint64(math.MaxUint64) << (128 - n))}
	}
	return Source{s.hi & (uint64(math.MaxUint64) << (64 - n)), 0}
}

// Addr returns the address s holds, unmapped for IPv4.
func (s Source) Addr() netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], s.hi)
	binary.BigEndian.PutUint64(b[8:], s.lo)
	return netip.AddrFrom16(b).Unmap()
}

// Hash returns a well-mixed hash of s, for tables that shard or probe by sources: any
// of its bits, the top ones included, may choose a shard.
func (s Source) Hash() uint64 {
	h := s.hi*0x9e3779b97f4a7c15 ^ bits.RotateLeft64(s.lo, 31)*0xc2b2ae3d27d4eb4f
	h ^= h >> 32
	h *= 0xd6e8feb86659fd93
	return h ^ h>>29
}

// SourcePrefix is how client addresses are counted as sources: an IPv4 address by its
// first IPv4 bits (0 to 32), an IPv6 address by its first IPv6 bits (0 to 128), as the
// ip.ipv4_prefix and ip.ipv6_prefix settings say. The edge's keys, quicconn's budgets
// and the penalty box all cut addresses with it, so that they agree on what one source
// is.
type SourcePrefix struct {
	IPv4, IPv6 int
}

// Source returns a's source: a cut to its family's prefix length.
func (p SourcePrefix) Source(a netip.Addr) Source {
	s := AddrSource(a)
	return s.Masked(p.Bits(s))
}

// Bits returns the prefix length of s's family.
func (p SourcePrefix) Bits(s Source) int {
	if s.Is4() {
		return p.IPv4
	}
	return p.IPv6
}

// Prefix returns a's source as a prefix (192.0.2.0/24, 2001:db8::/64). The zero Addr
// gives the zero Prefix.
func (p SourcePrefix) Prefix(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	s := p.Source(a)
	return netip.PrefixFrom(s.Addr(), p.Bits(s))
}
