package admission

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/h3edge/h3edge/limiter"
)

// TestShare walks the rule with a cap of 128 (soft mark 64, floor 1): a lone source
// (a /24) holds up to the soft mark, a second one is let in past it, the first is not
// (its share is now 63 ÷ 2); once its requests left, it holds nothing.
func TestShare(t *testing.T) {
	const limit = 128
	s := NewShare(limiter.SourcePrefix{IPv4: 24, IPv6: 64})
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.1")
	var inflight int64
	var holds []Hold
	enter := func(addr netip.Addr) bool {
		inflight++
		h, ok := s.Enter(addr, inflight, limit)
		if !ok {
			inflight--
			return false
		}
		holds = append(holds, h)
		return true
	}
	n := 0
	for enter(netip.AddrFrom4([4]byte{192, 0, 2, byte(n)})) && n < limit {
		n++
	}
	if n != limit/2 {
		t.Fatalf("a lone /24 held %d, want the soft mark %d", n, limit/2)
	}
	if !enter(b) {
		t.Fatal("a second source was shed past the soft mark")
	}
	if enter(a) {
		t.Error("the first source, over its share, was not shed")
	}
	if got := s.Holders(); got != 2 {
		t.Errorf("holders %d, want 2", got)
	}
	for _, h := range holds {
		h.Leave()
	}
	if got := s.Holders(); got != 0 {
		t.Errorf("holders %d after every request left, want 0", got)
	}
	inflight = limit / 2 // held by others, not counted here
	if !enter(a) {
		t.Error("the first source, holding nothing now, was shed")
	}
	if h, ok := s.Enter(a, 0, 0); !ok || h.s != nil {
		t.Error("not capped: counted or shed")
	}
}

// BenchmarkShare: what a request pays, Enter and Leave, below the soft mark (as
// nearly always) and past it; in parallel, each goroutine for sources of its own.
func BenchmarkShare(b *testing.B) {
	s := NewShare(limiter.SourcePrefix{IPv4: 32, IPv6: 64})
	for _, inflight := range []int64{10, 600} {
		b.Run(map[int64]string{10: "below", 600: "past"}[inflight], func(b *testing.B) {
			var g atomic.Int32
			b.RunParallel(func(pb *testing.PB) {
				i := int(g.Add(1)) << 12 // each goroutine its own sources
				for pb.Next() {
					i++
					if h, ok := s.Enter(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), inflight, 1024); ok {
						h.Leave()
					}
				}
			})
		})
	}
}
