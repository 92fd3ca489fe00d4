package penalty

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
)

// addrKey is an address in 16-byte form, IPv4 as IPv4-mapped: no unmapped IPv6 address
// has that form, so the two families never collide.
type addrKey struct{ hi, lo uint64 }

// boxKey is a prefix: its masked address and length, counted within the IPv4 address
// for IPv4.
type boxKey struct {
	addrKey
	bits uint8
}

const v4Mapped = 0xffff << 32 // the top of an IPv4-mapped address's low word

func key4(lo uint64, l int) boxKey {
	return boxKey{addrKey{0, v4Mapped | lo&uint64(uint32(math.MaxUint32)<<(32-l))}, uint8(l)}
}

func key6(hi, lo uint64, l int) boxKey {
	if l >= 64 {
		return boxKey{addrKey{hi, lo & (uint64(math.MaxUint64) << (128 - l))}, uint8(l)}
	}
	return boxKey{addrKey{hi & (uint64(math.MaxUint64) << (64 - l)), 0}, uint8(l)}
}

// family is 0 for IPv4, 1 for IPv6.
func (k boxKey) family() int {
	if k.hi == 0 && k.lo>>32 == 0xffff {
		return 0
	}
	return 1
}

func (k boxKey) prefix() netip.Prefix {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return netip.PrefixFrom(netip.AddrFrom16(b).Unmap(), int(k.bits))
}

// prefixKey returns the key of p, with p unmapped and masked.
func prefixKey(p netip.Prefix) (boxKey, netip.Prefix, bool) {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	if !p.IsValid() {
		return boxKey{}, p, false
	}
	p = p.Masked()
	b := p.Addr().As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	if p.Addr().Is4() {
		return key4(lo, p.Bits()), p, true
	}
	return key6(hi, lo, p.Bits()), p, true
}

func (k addrKey) hash() uint64 {
	h := k.hi*0x9e3779b97f4a7c15 ^ bits.RotateLeft64(k.lo, 31)*0xc2b2ae3d27d4eb4f
	h ^= h >> 32
	h *= 0xd6e8feb86659fd93
	return h ^ h>>29
}

func (k boxKey) hash() uint64 {
	return addrKey{k.hi, k.lo ^ uint64(k.bits)<<56}.hash()
}
