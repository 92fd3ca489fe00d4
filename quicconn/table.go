package quicconn

import (
	"math"
	"math/bits"
	"net/netip"
	"sync"
	"time"

	"github.com/h3edge/h3edge/limiter"
)

// bucket is a token bucket kept as one instant per source (GCRA): the instant at which
// the bucket is full again. With every = 1/rate and tau = (burst-1)·every, the bucket
// holds burst − max(0, full−t)/every tokens at t, so on non-decreasing instants it takes
// the decisions of rate.NewLimiter(rate, burst).AllowN(t, 1).
type bucket struct {
	every int64 // nanoseconds per token; 0: unlimited
	tau   int64 // how far past t the full instant may lie for one more token
}

// fresh is the full instant of a bucket that has never been used: full at any t.
const fresh = math.MinInt64

func newBucket(rate float64, burst int) bucket {
	if rate < 0 {
		return bucket{}
	}
	every := max(1, int64(math.Round(float64(time.Second)/rate)))
	return bucket{every: every, tau: int64(burst-1) * every}
}

// take spends one token at t if there is one.
func (b bucket) take(full *int64, t int64) bool {
	if b.every == 0 {
		return true
	}
	f := max(*full, t)
	if f-t > b.tau {
		return false
	}
	*full = f + b.every
	return true
}

// ready reports whether take would succeed at t, spending nothing.
func (b bucket) ready(full, t int64) bool {
	return b.every == 0 || max(full, t)-t <= b.tau
}

// entry is one source's state. It holds no pointers, so the maps of entries are never
// scanned by the garbage collector; 24 bytes plus the 16-byte key.
type entry struct {
	conn   int64  // full instant of the connection bucket
	stream int64  // full instant of the stream bucket
	open   uint32 // connections counted open
}

var freshEntry = entry{conn: fresh, stream: fresh}

// informative reports whether forgetting e at t would change a decision: a source with
// open connections or a bucket that is not full differs from a new one.
func (e *entry) informative(t int64) bool {
	return e.open > 0 || e.conn > t || e.stream > t
}

// Sweep effort, in entries examined under the shard lock. Every insertion examines a
// few entries so uninformative ones are reclaimed as the table grows; an insertion into
// a full shard looks further before giving up and using the overflow entry.
const (
	sweepOnInsert = 2
	sweepWhenFull = 32
)

// shard is one lock's worth of the table.
type shard struct {
	mu sync.Mutex
	// entries maps sources to their state; len(entries) ≤ Guard.perShard.
	entries map[limiter.Source]entry
	// conns heads each source's list of open Slots (overflowed ones included).
	conns map[limiter.Source]*Slot
	// overflow is the state shared by new sources that find the shard full of
	// informative entries: [0] for unvalidated addresses, [1] for validated ones (a
	// spoofed flood cannot drain [1]). Its open count is not capped.
	overflow [2]entry
	open     int // slots held in this shard
	// Counters, read by Stats.
	refusedRate, refusedMax, refusedStreams, overflowed uint64

	_ [64]byte // keep neighbouring shards' locks off this cache line
}

// lookup returns the entry of k, inserting a fresh one when there is room. When the
// shard is full of informative entries it returns the overflow entry and tracked false.
// The caller holds s.mu and writes a tracked entry back with s.entries[k] = e.
func (s *shard) lookup(k limiter.Source, t int64, limit int, validated bool) (e entry, tracked bool) {
	if e, ok := s.entries[k]; ok {
		return e, true
	}
	n := sweepOnInsert
	if len(s.entries) >= limit {
		n = sweepWhenFull
	}
	s.sweep(t, n)
	if len(s.entries) >= limit {
		s.overflowed++
		if validated {
			return s.overflow[1], false
		}
		return s.overflow[0], false
	}
	return freshEntry, true
}

// store writes back what lookup returned.
func (s *shard) store(k limiter.Source, e entry, tracked, validated bool) {
	switch {
	case tracked:
		s.entries[k] = e
	case validated:
		s.overflow[1] = e
	default:
		s.overflow[0] = e
	}
}

// sweep examines up to n entries, starting at a random place (Go's map iteration
// order), and forgets those that carry no information.
func (s *shard) sweep(t int64, n int) {
	for k, e := range s.entries {
		if n == 0 {
			return
		}
		n--
		if !e.informative(t) {
			delete(s.entries, k)
		}
	}
}

// link adds sl to its source's list of open slots.
func (s *shard) link(sl *Slot) {
	if head := s.conns[sl.key]; head != nil {
		head.prev = sl
		sl.next = head
	}
	s.conns[sl.key] = sl
	s.open++
}

// unlink removes sl from its source's list.
func (s *shard) unlink(sl *Slot) {
	if sl.prev != nil {
		sl.prev.next = sl.next
	} else if sl.next != nil {
		s.conns[sl.key] = sl.next
	} else {
		delete(s.conns, sl.key)
	}
	if sl.next != nil {
		sl.next.prev = sl.prev
	}
	sl.prev, sl.next = nil, nil
	s.open--
}

// table is the bounded, sharded per-source state.
type table struct {
	shards   []shard
	shift    uint // 64 − log2(len(shards))
	perShard int  // entries per shard; len(shards)·perShard ≤ MaxTracked

	sources limiter.SourcePrefix // how addresses are cut into sources
}

const maxShards = 256

func newTable(maxTracked, bits4, bits6 int) *table {
	n := 1
	for n < maxShards && n*2*64 <= maxTracked {
		n *= 2
	}
	t := &table{
		shards:   make([]shard, n),
		shift:    uint(64 - bits.TrailingZeros(uint(n))),
		perShard: maxTracked / n,
		sources:  limiter.SourcePrefix{IPv4: bits4, IPv6: bits6},
	}
	for i := range t.shards {
		t.shards[i].entries = make(map[limiter.Source]entry)
		t.shards[i].conns = make(map[limiter.Source]*Slot)
		t.shards[i].overflow = [2]entry{freshEntry, freshEntry}
	}
	return t
}

// key returns a's source. IPv4-mapped addresses count as IPv4; the zero Addr is the
// source "::".
func (t *table) key(a netip.Addr) limiter.Source { return t.sources.Source(a) }

func (t *table) shard(k limiter.Source) *shard {
	return &t.shards[k.Hash()>>t.shift]
}
