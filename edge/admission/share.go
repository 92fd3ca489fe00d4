package admission

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"

	"github.com/h3edge/h3edge/limiter"
)

// Each source's share of the in-flight cap (limits.max_inflight_requests). Without
// one, a few sources holding slow requests (slow POST's bodies, overload's held
// handlers) filled the cap before any of them was banned, and every other client was
// shed with them: a 503 from the cap charges nobody. So, once more than half the cap
// (the soft mark) is in flight, a request from a source that holds its share already
// is shed with the prebuilt 503 and charges its source one rejection toward a ban, as
// the other abuse paths charge. The share is the room left under the cap divided among
// the sources holding requests now — the soft mark's even part at the mark, shrinking
// as the cap fills, so that sources that came early and took much cannot leave the
// late ones nothing — and never less than a 64th of the soft mark (8 at the default
// 1 024 per core). Below the mark nothing is shed, a lone source may hold half the
// cap, and only a crowd of 64 sources or more, each within the floor, fills the cap.
//
// The counts are kept per source in two rows of counters indexed by two seeded
// hashes of the source (cut as ip.ipv4_prefix and ipv6_prefix say), and a source's
// count is the lesser of its two: a fixed 128 KiB however many sources come, and no
// lock or map on the request path: two atomic adds as a request enters and two as it
// leaves, one more (on a striped count of the sources holding) when its source's count
// leaves 0 or returns to it; 27–31 ns a request on one core (BenchmarkShare). Sources
// sharing a counter in one row are told apart by the other; a source
// shares both with another about once in (2¹⁴ ÷ sources holding)², and is then
// counted with it, never below its own count.

const (
	shareRows = 2
	shareBits = 14
	// shareFloor is the soft mark's part a source may always hold: 1/64.
	shareFloor = 64
	// shareStripes is how many stripes holders is kept in.
	shareStripes = 8
)

// Share counts the requests each source holds in flight. Make it with NewShare; it is
// safe for concurrent use.
type Share struct {
	sources limiter.SourcePrefix
	seeds   [shareRows]uint64
	// holders counts the sources holding a request (counters of the first row above
	// 0), in stripes by counter so that cores entering for different sources do not
	// contend for one cache line; summed only past the soft mark.
	holders [shareStripes]struct {
		n atomic.Int64
		_ [56]byte
	}
	counts [shareRows][1 << shareBits]atomic.Int32
}

// NewShare returns a Share that cuts addresses into sources as sources says.
func NewShare(sources limiter.SourcePrefix) *Share {
	return &Share{sources: sources, seeds: [shareRows]uint64{rand.Uint64(), rand.Uint64()}}
}

// Hold is a request's place in its source's count; Leave gives it back.
type Hold struct {
	s   *Share
	idx [shareRows]uint32
}

// Enter counts a request from addr in, given the requests in flight (this one
// included) and the cap (0 or less: not capped, and nothing is counted). It reports
// false, counting nothing, when the request is to be shed: over the soft mark, from a
// source holding its share already.
func (s *Share) Enter(addr netip.Addr, inflight, limit int64) (Hold, bool) {
	if limit <= 0 {
		return Hold{}, true
	}
	k := s.sources.Source(addr).Hash()
	h := Hold{s: s}
	held := int32(math.MaxInt32)
	for r := range shareRows {
		// The multiply makes the top bits depend on the seed: an attacker cannot pick
		// an address that shares a legitimate source's counters.
		h.idx[r] = uint32((k ^ s.seeds[r]) * 0x9e3779b97f4a7c15 >> (64 - shareBits))
		n := s.counts[r][h.idx[r]].Add(1)
		if r == 0 && n == 1 {
			s.holders[h.idx[0]%shareStripes].n.Add(1)
		}
		held = min(held, n)
	}
	soft := limit / 2
	if inflight <= soft {
		return h, true
	}
	// The room left under the cap among the sources holding, this one included.
	share := max((limit-inflight)/max(s.Holders(), 1), soft/shareFloor, 1)
	if int64(held) > share {
		h.Leave()
		return Hold{}, false
	}
	return h, true
}

// Leave gives back what Enter counted.
func (h Hold) Leave() {
	if h.s == nil {
		return
	}
	if h.s.counts[0][h.idx[0]].Add(-1) == 0 {
		h.s.holders[h.idx[0]%shareStripes].n.Add(-1)
	}
	for r := 1; r < shareRows; r++ {
		h.s.counts[r][h.idx[r]].Add(-1)
	}
}

// Holders returns how many sources hold requests now.
func (s *Share) Holders() int64 {
	var n int64
	for i := range s.holders {
		n += s.holders[i].n.Load()
	}
	return n
}
