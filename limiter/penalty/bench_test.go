package penalty

import (
	"net/netip"
	"testing"
	"time"
)

func BenchmarkBanned(b *testing.B) {
	p := mustBox(b, Config{})
	until := time.Now().Add(time.Hour)
	for i := range 10_000 { // bans in force, as after an attack
		p.Add(Ban{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32), Until: until})
		p.Add(Ban{Prefix: netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb9, 6: byte(i >> 8), 7: byte(i)}), 64), Until: until})
	}
	empty := mustBox(b, Config{})
	for _, bc := range []struct {
		name string
		p    *Box
		addr func(i int) netip.Addr
	}{
		{"empty", empty, func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }},
		{"miss", p, func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }},
		{"hit", p, func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}) }},
		{"miss-ipv6", p, func(i int) netip.Addr {
			return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 6: byte(i >> 8), 7: byte(i), 15: 1})
		}},
		{"hit-ipv6", p, func(i int) netip.Addr {
			return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb9, 6: byte(i >> 8), 7: byte(i), 15: 1})
		}},
	} {
		addrs := make([]netip.Addr, 1024)
		for i := range addrs {
			addrs[i] = bc.addr(i)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					bc.p.Banned(addrs[i&1023])
					i++
				}
			})
		})
	}
}

// BenchmarkReject counts rejections of 1024 known sources (none reaches a ban), and of
// a new source each time in a full table (eviction).
func BenchmarkReject(b *testing.B) {
	b.Run("known", func(b *testing.B) {
		p := mustBox(b, Config{Rejections: 1 << 30})
		now := time.Now()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			now = now.Add(time.Microsecond)
			p.Reject(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8 & 3), byte(i)}), now)
		}
	})
	b.Run("flood", func(b *testing.B) {
		p := mustBox(b, Config{MaxTracked: 65536})
		now := time.Now()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			now = now.Add(time.Microsecond)
			p.Reject(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), now)
		}
	})
}
