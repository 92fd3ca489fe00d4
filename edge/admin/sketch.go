package admin

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/h3edge/h3edge/limiter/minheap"
)

// The sketch behind Top: each of its two streams is tracked by a Space-Saving sketch
// (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and top-k elements
// in data streams", 2005): a fixed number of counters, whatever the number of distinct
// keys.
// A key that is not tracked takes over the smallest counter and inherits its count as
// its possible error, so every count is an overestimate by at most the error shown, and
// every key whose true count exceeds the stream length ÷ capacity is tracked.

const (
	// sketchCapacity is the counters of each sketch (split among its shards), and the
	// largest n /api/v1/top answers.
	sketchCapacity = 1024
	// sketchShards is the independently locked parts of each sketch. Keys are spread
	// over them by hash, so a key lives in exactly one shard.
	sketchShards = 16
)

// hitter is one heavy hitter: its estimated count, an overestimate by at most Err.
type hitter[K comparable] struct {
	Key   K
	Count uint64
	Err   uint64
}

// sketch is a sharded Space-Saving sketch of fixed capacity. It is safe for concurrent
// use; observe allocates nothing.
type sketch[K comparable] struct {
	shards [sketchShards]ssShard[K]
	hash   func(K) uint64
	// sampleMask: a request is observed when a random number's low bits under the mask
	// are zero (one in mask+1), with weight mask+1. 0 observes every request.
	sampleMask uint32
}

// newSketch returns a sketch of capacity counters in all. hash must spread keys
// uniformly over 64 bits. Each request is observed with probability 1/sample (rounded
// up to a power of two; 0 or 1: every request), and counted sample times.
func newSketch[K comparable](capacity, sample int, hash func(K) uint64) *sketch[K] {
	t := &sketch[K]{hash: hash}
	if sample > 1 {
		t.sampleMask = 1<<bits.Len(uint(sample-1)) - 1
	}
	per := max(1, capacity/sketchShards)
	for i := range t.shards {
		t.shards[i].init(per)
	}
	return t
}

// sampled reports whether the next request is to be observed. Callers that must do
// work to compute the key ask first.
func (t *sketch[K]) sampled() bool {
	return t.sampleMask == 0 || rand.Uint32()&t.sampleMask == 0
}

// observe counts one sampled request for k.
func (t *sketch[K]) observe(k K) {
	h := t.hash(k)
	t.shards[h>>60&(sketchShards-1)].observe(k, h, uint64(t.sampleMask)+1)
}

// decay halves every count, so that what is reported is weighted towards the recent
// past: after each call old traffic counts half as much.
func (t *sketch[K]) decay() {
	for i := range t.shards {
		t.shards[i].decay()
	}
}

// top returns the n heaviest keys, heaviest first.
func (t *sketch[K]) top(n int) []hitter[K] {
	var all []hitter[K]
	for i := range t.shards {
		all = t.shards[i].appendTo(all)
	}
	slices.SortFunc(all, func(a, b hitter[K]) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Err, b.Err)
	})
	if n < len(all) {
		all = all[:n]
	}
	return slices.Clip(all)
}

// ssShard is one shard of a sketch: a Space-Saving summary whose counters form a min-heap on
// count, indexed by an open-addressing table of fixed size. Nothing grows after init.
type ssShard[K comparable] struct {
	mu sync.Mutex
	// heap holds the counters by count, the smallest at 0; len ≤ cap, fixed at init.
	heap minheap.Heap[uint64, ssCounter[K]]
	// slots index the heap by key hash: linear probing, 0 empty, else heap position+1.
	slots []int32
	mask  uint64
}

// ssCounter is a counter but for its count, the heap's key.
type ssCounter[K comparable] struct {
	key  K
	hash uint64
	err  uint64
	slot int32 // where in slots this counter is indexed
}

// init sizes the shard for capacity counters; nothing is allocated after it.
func (s *ssShard[K]) init(capacity int) {
	s.heap.Items = make([]minheap.Item[uint64, ssCounter[K]], 0, capacity)
	s.heap.Moved = func(c *minheap.Item[uint64, ssCounter[K]], i int) { s.slots[c.Value.slot] = int32(i + 1) }
	n := 1 << bits.Len(uint(2*capacity-1)) // load factor at most 1/2
	s.slots = make([]int32, n)
	s.mask = uint64(n - 1)
}

// observe adds w to k's count; h is k's hash.
func (s *ssShard[K]) observe(k K, h uint64, w uint64) {
	s.mu.Lock()
	i := h & s.mask
	for {
		p := s.slots[i]
		if p == 0 {
			break
		}
		if c := &s.heap.Items[p-1]; c.Value.hash == h && c.Value.key == k {
			c.Key += w
			s.heap.Fix(int(p - 1))
			s.mu.Unlock()
			return
		}
		i = (i + 1) & s.mask
	}
	if s.heap.Len() < cap(s.heap.Items) {
		// Not tracked and there is room: a new counter, exact.
		s.heap.Push(w, ssCounter[K]{key: k, hash: h, slot: int32(i)})
		s.mu.Unlock()
		return
	}
	// Not tracked and full: k takes over the smallest counter.
	old := s.heap.Items[0]
	s.unindex(old.Value.slot)
	i = h & s.mask // unindex may have shifted entries into the probe sequence
	for s.slots[i] != 0 {
		i = (i + 1) & s.mask
	}
	s.heap.Items[0] = minheap.Item[uint64, ssCounter[K]]{Key: old.Key + w, Value: ssCounter[K]{key: k, hash: h, err: old.Key, slot: int32(i)}}
	s.slots[i] = 1
	s.heap.Fix(0)
	s.mu.Unlock()
}

// unindex empties slot i and moves later entries of its probe run back (backward-shift
// deletion), so lookups never need tombstones.
func (s *ssShard[K]) unindex(i int32) {
	j := uint64(i)
	for {
		s.slots[j] = 0
		k := j
		for {
			k = (k + 1) & s.mask
			p := s.slots[k]
			if p == 0 {
				return
			}
			c := &s.heap.Items[p-1].Value
			home := c.hash & s.mask
			// The entry at k may move to j unless its home lies cyclically in (j, k].
			if (j < k && (home <= j || home > k)) || (j > k && home <= j && home > k) {
				s.slots[j] = p
				c.slot = int32(j)
				j = k
				break
			}
		}
	}
}

// decay halves the counts. Halving keeps the heap order (a ≤ b ⇒ a/2 ≤ b/2).
func (s *ssShard[K]) decay() {
	s.mu.Lock()
	for i := range s.heap.Items {
		c := &s.heap.Items[i]
		c.Key /= 2
		c.Value.err /= 2
	}
	s.mu.Unlock()
}

// appendTo appends the shard's counters with a count to out.
func (s *ssShard[K]) appendTo(out []hitter[K]) []hitter[K] {
	s.mu.Lock()
	for _, c := range s.heap.Items {
		if c.Key > 0 {
			out = append(out, hitter[K]{Key: c.Value.key, Count: c.Key, Err: c.Value.err})
		}
	}
	s.mu.Unlock()
	return out
}
