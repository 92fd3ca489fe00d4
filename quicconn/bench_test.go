package quicconn

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"
)

// cannedBatch stands in for the kernel: every ReadBatch fills the slots with the same
// eight 1200-byte datagrams with 32 bytes of control data.
type cannedBatch struct {
	addrs []net.Addr
}

func (c *cannedBatch) ReadBatch(ms []ipv4.Message, _ int) (int, error) {
	n := min(len(ms), len(c.addrs))
	for i := range n {
		ms[i].N, ms[i].NN, ms[i].Addr, ms[i].Flags = 1200, 32, c.addrs[i], 0
	}
	return n, nil
}

func benchSocket(b *testing.B, bannedAt map[int]bool) (*Socket, []ipv4.Message) {
	banned := map[netip.Addr]bool{}
	var addrs []net.Addr
	for i := range 8 {
		ip := net.IPv4(192, 0, 2, byte(10+i))
		addrs = append(addrs, &net.UDPAddr{IP: ip, Port: 4433})
		if bannedAt[i] {
			a, _ := netip.AddrFromSlice(ip)
			banned[a.Unmap()] = true
		}
	}
	g := mustNew(b, Config{Banned: func(a netip.Addr) bool { return banned[a] }})
	s := &Socket{g: g, br: &cannedBatch{addrs: addrs}}
	ms := make([]ipv4.Message, 8)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 1452)}
		ms[i].OOB = make([]byte, 128)
	}
	return s, ms
}

// BenchmarkFilterReadBatch is the filter's cost per batch of 8 datagrams, 3 of them
// banned (5 moved into their slot's own buffer), without the syscall.
func BenchmarkFilterReadBatch(b *testing.B) {
	for _, bc := range []struct {
		name   string
		banned map[int]bool
	}{
		{"none-banned", nil},
		{"3-of-8-banned", map[int]bool{1: true, 4: true, 6: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, ms := benchSocket(b, bc.banned)
			b.ReportAllocs()
			for b.Loop() {
				if n, _ := s.ReadBatch(ms, 0); n != 8-len(bc.banned) {
					b.Fatalf("kept %d", n)
				}
			}
		})
	}
}

// BenchmarkFilterReadBatchParallel runs one Socket per goroutine on one Guard, as with
// several SO_REUSEPORT sockets: they share only the drop counter.
func BenchmarkFilterReadBatchParallel(b *testing.B) {
	s, _ := benchSocket(b, map[int]bool{1: true, 4: true, 6: true})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mine := *s
		ms := make([]ipv4.Message, 8)
		for i := range ms {
			ms[i].Buffers = [][]byte{make([]byte, 1452)}
			ms[i].OOB = make([]byte, 128)
		}
		for pb.Next() {
			mine.ReadBatch(ms, 0)
		}
	})
}

func BenchmarkConnContext(b *testing.B) {
	g := mustNew(b, Config{ConnRate: -1})
	infos := make([]*quic.ClientInfo, 4096)
	for i := range infos {
		infos[i] = &quic.ClientInfo{RemoteAddr: &net.UDPAddr{IP: net.IPv4(10, 1, byte(i>>8), byte(i)), Port: 443}}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// quic-go's own per-connection context, cancelled when the connection ends.
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := g.ConnContext(ctx, infos[i%len(infos)]); err != nil {
			b.Fatal(err)
		}
		cancel()
		i++
	}
}

func BenchmarkConnContextParallel(b *testing.B) {
	g := mustNew(b, Config{ConnRate: -1})
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		base := next.Add(1)
		infos := make([]*quic.ClientInfo, 256)
		for i := range infos {
			infos[i] = &quic.ClientInfo{RemoteAddr: &net.UDPAddr{IP: net.IPv4(10, byte(base), 0, byte(i)), Port: 443}}
		}
		i := 0
		for pb.Next() {
			ctx, cancel := context.WithCancel(context.Background())
			if _, err := g.ConnContext(ctx, infos[i%len(infos)]); err != nil {
				b.Fatal(err)
			}
			cancel()
			i++
		}
	})
}

func BenchmarkVerifySourceAddress(b *testing.B) {
	g := mustNew(b, Config{RetryAbove: -1})
	addr := &net.UDPAddr{IP: net.IPv4(10, 2, 3, 4), Port: 443}
	b.ReportAllocs()
	for b.Loop() {
		g.VerifySourceAddress(addr)
	}
}

// BenchmarkAllowStream takes now from the caller (time.Now costs ~50 ns on these VMs).
func BenchmarkAllowStream(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"allowed", Config{StreamRate: 1e9, StreamBurst: 1 << 30}},
		{"refused", Config{StreamRate: 1, StreamBurst: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := mustNew(b, bc.cfg)
			a := netip.MustParseAddr("2001:db8::1")
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				g.AllowStream(a, now)
			}
		})
	}
}

func BenchmarkAllowStreamParallel(b *testing.B) {
	for _, bc := range []struct {
		name     string
		distinct bool
	}{{"distinct-sources", true}, {"one-source", false}} {
		b.Run(bc.name, func(b *testing.B) {
			g := mustNew(b, Config{StreamRate: 1e9, StreamBurst: 1 << 30})
			var next atomic.Int64
			now := time.Now()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				a := netip.MustParseAddr("198.51.100.1")
				if bc.distinct {
					a = netip.AddrFrom4([4]byte{198, 51, 100, byte(next.Add(1))})
				}
				for pb.Next() {
					g.AllowStream(a, now)
				}
			})
		})
	}
}
