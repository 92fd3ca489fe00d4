package admission

import (
	"net/netip"
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
	if got := s.holders.Load(); got != 2 {
		t.Errorf("holders %d, want 2", got)
	}
	for _, h := range holds {
		h.Leave()
	}
	if got := s.holders.Load(); got != 0 {
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
