package edge

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/h3edge/h3edge/limiter"
)

// zipfKey is the client key of rank i (0 heaviest) in the zipf tests.
func zipfKey(i uint64) limiter.Key {
	var k limiter.Key
	binary.LittleEndian.PutUint64(k[:], i*0x9e3779b97f4a7c15)
	binary.LittleEndian.PutUint64(k[8:], (i+1)*0xc2b2ae3d27d4eb4f)
	return k
}

// TestTopZipf feeds 1,000,000 requests of 100,000 client keys in a zipf distribution
// through the production sketch and reads the 5 heaviest back through /api/v1/top:
// they are named in order, and the sketch's memory does not grow with the keys.
func TestTopZipf(t *testing.T) {
	const keys, stream = 100_000, 1_000_000
	m := &metrics{top: newHeavyHitters()}
	a := &admin{m: m}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, keys-1)
	truth := make([]uint64, keys)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range stream {
		i := z.Uint64()
		truth[i]++
		m.observeKey(zipfKey(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// truth itself is allocated before `before`; what grew is the sketch's own doing.
	t.Logf("heap growth over %d requests of %d keys: %d bytes; sketch: %d counters, %d bytes, fixed",
		stream, keys, int64(after.HeapAlloc)-int64(before.HeapAlloc), topCapacity, sketchBytes(m.top.keys))
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<10 {
		t.Errorf("heap grew by %d bytes while observing; the sketch must not grow", grew)
	}

	rec := httptest.NewRecorder()
	a.top(rec, httptest.NewRequest("GET", "/api/v1/top?n=5", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /api/v1/top: %d %s", rec.Code, rec.Body)
	}
	var body topBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Keys) != 5 {
		t.Fatalf("got %d keys, want 5", len(body.Keys))
	}
	order := make([]int, keys)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(truth[b]) - int(truth[a]) })
	for rank, got := range body.Keys {
		k := zipfKey(uint64(order[rank]))
		if got.Key != hex.EncodeToString(k[:]) {
			t.Errorf("rank %d: got key %s…, want rank %d's", rank, got.Key[:8], order[rank])
			continue
		}
		c := truth[order[rank]]
		if got.Count < c || got.Count-got.Error > c {
			t.Errorf("rank %d: count %d ± %d does not bound the true %d", rank, got.Count, got.Error, c)
		}
		t.Logf("rank %d: true %d, estimated %d (error ≤ %d)", rank, c, got.Count, got.Error)
	}
}

// TestTopSourcesSampled checks that the sampled source sketch still ranks the heaviest
// prefixes of a zipf stream.
func TestTopSourcesSampled(t *testing.T) {
	const sources, stream = 100_000, 1_000_000
	hh := newHeavyHitters()
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, sources-1)
	prefix := func(i uint64) netip.Prefix {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], 0x0a000000+uint32(i))
		return netip.PrefixFrom(netip.AddrFrom4(a), 32)
	}
	for range stream {
		i := z.Uint64()
		if hh.sources.sampled() {
			hh.sources.observe(prefix(i))
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
	tk := newTopK(4*topShards, 1, hash)
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

// sketchBytes is the fixed memory of a sketch's counters and index.
func sketchBytes[K comparable](tk *topK[K]) int {
	n := 0
	for i := range tk.shards {
		s := &tk.shards[i]
		n += cap(s.heap.Items)*int(unsafe.Sizeof(s.heap.Items[:1][0])) + len(s.slots)*4
	}
	return n
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
	hh := newHeavyHitters()
	var i uint64
	if n := testing.AllocsPerRun(10_000, func() {
		i++
		hh.keys.observe(zipfKey(i))
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
			tk := newTopK(topCapacity, bc.sample, topKeyHash)
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
