package limiter

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestSourcePrefix(t *testing.T) {
	sp := SourcePrefix{IPv4: 24, IPv6: 48}
	for _, tt := range []struct {
		addr, want string // want: the prefix; "" for the zero Prefix
	}{
		{"192.0.2.77", "192.0.2.0/24"},
		{"::ffff:192.0.2.77", "192.0.2.0/24"}, // IPv4-mapped counts as IPv4
		{"2001:db8:1:2:3::4", "2001:db8:1::/48"},
		{"fe80::1%eth0", "fe80::/48"},
		{"::", "::/48"},
		{"", ""},
	} {
		var a netip.Addr
		if tt.addr != "" {
			a = netip.MustParseAddr(tt.addr)
		}
		got := sp.Prefix(a)
		if tt.want == "" {
			if got.IsValid() {
				t.Errorf("Prefix(%q) = %v, want the zero Prefix", tt.addr, got)
			}
			continue
		}
		if got != netip.MustParsePrefix(tt.want) {
			t.Errorf("Prefix(%q) = %v, want %s", tt.addr, got, tt.want)
		}
	}
	if sp.Source(netip.MustParseAddr("192.0.2.1")) != sp.Source(netip.MustParseAddr("::ffff:192.0.2.200")) {
		t.Error("an IPv4 address and an IPv4-mapped one of its /24 are different sources")
	}
	// ::c000:200 holds 192.0.2.0's bits but is no IPv4-mapped address: another family.
	if sp.Source(netip.MustParseAddr("192.0.2.0")) == (SourcePrefix{IPv4: 32, IPv6: 128}).Source(netip.MustParseAddr("::c000:200")) {
		t.Error("an IPv4 source equals an IPv6 one")
	}
}

// TestSourceMaskedAsNetip: for every length, Masked agrees with netip's own masking,
// and Is4 and Addr give back the family and the masked address.
func TestSourceMaskedAsNetip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var b16 [16]byte
		for i := range b16 {
			b16[i] = byte(r.Uint32())
		}
		b4 := [4]byte(b16[:4])
		for _, a := range []netip.Addr{netip.AddrFrom4(b4), netip.AddrFrom16(b16)} {
			s := AddrSource(a)
			if s.Is4() != a.Is4() || s.Addr() != a {
				t.Fatalf("AddrSource(%v): Is4 %v, Addr %v", a, s.Is4(), s.Addr())
			}
			for n := range a.BitLen() + 1 {
				want, _ := a.Prefix(n)
				if got := s.Masked(n); got.Addr() != want.Addr() || got != AddrSource(want.Addr()) {
					t.Fatalf("AddrSource(%v).Masked(%d) = %v, want %v", a, n, got.Addr(), want.Addr())
				}
			}
		}
	}
}

func BenchmarkSourcePrefix(b *testing.B) {
	sp := SourcePrefix{IPv4: 32, IPv6: 64}
	a4, a6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	b.ReportAllocs()
	for b.Loop() {
		sp.Source(a4)
		sp.Source(a6)
	}
}
