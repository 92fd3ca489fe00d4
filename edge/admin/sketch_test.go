package admin

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/h3edge/h3edge/limiter"
)

// zipfKey is the client key of rank i (0 heaviest) in the zipf tests. (edge's
// TestTopZipf ranks the same keys through a running edge.)
func zipfKey(i uint64) limiter.Key {
	var k limiter.Key
	binary.LittleEndian.PutUint64(k[:], i*0x9e3779b97f4a7c15)
	binary.LittleEndian.PutUint64(k[8:], (i+1)*0xc2b2ae3d27d4eb4f)
	return k
}

// TestTopSourcesSampled checks that the sampled source sketch still ranks the heaviest
// prefixes of a zipf stream.
func TestTopSourcesSampled(t *testing.T) {
	const sources, stream = 100_000, 1_000_000
	hh := NewTop()
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, sources-1)
	prefix := func(i uint64) netip.Prefix {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], 0x0a000000+uint32(i))
		return netip.PrefixFrom(netip.AddrFrom4(a), 32)
	}
	for range stream {
		i := z.Uint64()
		if hh.SourceSampled() {
			hh.ObserveSource(prefix(i))
		}
	}
	top := hh.sources.top(5)
	for rank, h := range top {
		if want := prefix(uint64(rank)); h.Key != want {
			t.Errorf("rank %d: got %s, want %s", rank, h.Key, want)
		}
	}
	t.Logf("sampled 1 in %d: %v", hh.sources.sampleMask+1, top)
}

// TestSketchIndex drives shards of four counters with colliding hashes and checks,
// after every step, the heap order, the open-addressing index, and exact counts
// while the distinct keys fit.
func TestSketchIndex(t *testing.T) {
	// A poor hash on purpose: few shards and long probe runs.
	hash := func(k uint64) uint64 { return (k%3)<<60 | k%5 }
	tk := newSketch(4*sketchShards, 1, hash)
	r := rand.New(rand.NewPCG(5, 6))
	exact := map[uint64]uint64{}
	for step := range 20_000 {
		k := r.Uint64N(40)
		if step < 2000 {
			k %= 4 // four keys: all tracked, counts exact
		}
		tk.observe(k)
		exact[k]++
		if step%97 == 0 {
			tk.decay()
			for k := range exact {
				exact[k] /= 2
			}
		}
		for i := range tk.shards {
			checkShard(t, &tk.shards[i])
		}
		if step < 2000 {
			for _, h := range tk.top(10) {
				if h.Count != exact[h.Key] || h.Err != 0 {
					t.Fatalf("step %d: key %d count %d err %d, want %d exactly", step, h.Key, h.Count, h.Err, exact[h.Key])
				}
			}
		}
		if t.Failed() {
			t.Fatalf("step %d", step)
		}
	}
}

// checkShard checks a shard's heap order and index.
func checkShard[K comparable](t *testing.T, s *ssShard[K]) {
	t.Helper()
	used := 0
	for _, p := range s.slots {
		if p != 0 {
			used++
		}
	}
	if used != s.heap.Len() {
		t.Errorf("%d slots used for %d counters", used, s.heap.Len())
	}
	for i, it := range s.heap.Items {
		c := it.Value
		if s.slots[c.slot] != int32(i+1) {
			t.Errorf("counter %d: slot %d holds %d", i, c.slot, s.slots[c.slot])
		}
		// Reachable from its home without crossing an empty slot.
		for j := c.hash & s.mask; j != uint64(c.slot); j = (j + 1) & s.mask {
			if s.slots[j] == 0 {
				t.Errorf("counter %d: empty slot %d between home and slot %d", i, j, c.slot)
				break
			}
		}
		if i > 0 && s.heap.Items[(i-1)/2].Key > it.Key {
			t.Errorf("heap order broken at %d", i)
		}
	}
}

// TestTopObserveAllocs: observing allocates nothing, whatever the key.
func TestTopObserveAllocs(t *testing.T) {
	hh := NewTop()
	var i uint64
	if n := testing.AllocsPerRun(10_000, func() {
		i++
		hh.ObserveKey(zipfKey(i))
	}); n != 0 {
		t.Errorf("observe allocates %v times", n)
	}
}

// BenchmarkTopObserve measures one sketch update from parallel goroutines: a new key
// each time (the worst case: take over the smallest counter) and a hot key.
func BenchmarkTopObserve(b *testing.B) {
	for _, bc := range []struct {
		name   string
		sample int
		hot    bool
	}{{"new-keys", 1, false}, {"hot-key", 1, true}, {"new-keys-sampled-8", 8, false}} {
		b.Run(bc.name, func(b *testing.B) {
			tk := newSketch(sketchCapacity, bc.sample, keyHash)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.Uint64()
				for pb.Next() {
					if !bc.hot {
						i++
					}
					if tk.sampled() {
						tk.observe(zipfKey(i))
					}
				}
			})
		})
	}
}
