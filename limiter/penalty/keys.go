package penalty

import (
	"net/netip"

	"github.com/h3edge/h3edge/limiter"
)

// boxKey is a prefix: its masked address and its length, counted within the IPv4
// address for IPv4.
type boxKey struct {
	src  limiter.Source
	bits uint8
}

// keyOf returns the key of s's first n bits.
func keyOf(s limiter.Source, n int) boxKey {
	return boxKey{s.Masked(n), uint8(n)}
}

// family is 0 for IPv4, 1 for IPv6.
func (k boxKey) family() int {
	if k.src.Is4() {
		return 0
	}
	return 1
}

func (k boxKey) prefix() netip.Prefix {
	return netip.PrefixFrom(k.src.Addr(), int(k.bits))
}

// prefixKey returns the key of p, with p unmapped and masked.
func prefixKey(p netip.Prefix) (boxKey, netip.Prefix, bool) {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	if !p.IsValid() {
		return boxKey{}, p, false
	}
	// Masked by netip already: a prefix of IPv4-mapped addresses shorter than /96 keeps
	// its IPv6 form, which Source.Masked would take for IPv4.
	p = p.Masked()
	return boxKey{limiter.AddrSource(p.Addr()), uint8(p.Bits())}, p, true
}

// hash is the source's hash with the length mixed in, so that the prefixes of one
// address spread over the table.
func (k boxKey) hash() uint64 {
	return k.src.Hash() ^ uint64(k.bits)*0x9e3779b97f4a7c15
}
