package bench

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// Pacer is the open-loop schedule: request i is intended to leave at Start + i/Rate,
// spread evenly whatever the workers are doing. Workers take the next free index in
// turn; one that is behind sends at once and is still measured from the intended time,
// so a stalled server shows up in the latencies (no coordinated omission, as in wrk2).
type Pacer struct {
	Start time.Time
	// Rate is requests per second over all connections; it must be positive.
	Rate float64
}

// At returns the intended send time of request i (counting from 0).
func (p Pacer) At(i int64) time.Time {
	return p.Start.Add(p.Offset(i))
}

// Offset returns request i's intended send time relative to Start.
func (p Pacer) Offset(i int64) time.Duration {
	return time.Duration(math.Round(float64(i) * float64(time.Second) / p.Rate))
}

// Before returns how many requests are intended to leave before Start+d: the first
// index whose send time is at or after Start+d.
func (p Pacer) Before(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(math.Ceil(d.Seconds() * p.Rate))
	// Rounding can put the float guess one off either way; settle it on Offset itself.
	for n > 0 && p.Offset(n-1) >= d {
		n--
	}
	for p.Offset(n) < d {
		n++
	}
	return n
}

// keyPicker chooses API keys for one worker. Not safe for concurrent use.
type keyPicker struct {
	n    int
	rnd  *rand.Rand
	zipf *rand.Zipf
	// names caches the key strings when there are few enough.
	names []string
}

// maxCachedKeys bounds the precomputed key names (about 40 B each).
const maxCachedKeys = 1 << 16

func keyName(i int) string {
	s := strconv.Itoa(i)
	if len(s) < 6 {
		s = "000000"[len(s):] + s
	}
	return "k-" + s
}

// newKeyPicker returns a picker over n keys (none if n <= 0): uniform, or Zipf with
// exponent s when s > 1 (key 0 the most frequent). names may be shared between pickers.
func newKeyPicker(n int, s float64, seed uint64, names []string) *keyPicker {
	if n <= 0 {
		return nil
	}
	k := &keyPicker{n: n, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), names: names}
	if s > 1 && n > 1 {
		k.zipf = rand.NewZipf(k.rnd, s, 1, uint64(n-1))
	}
	return k
}

func (k *keyPicker) next() string {
	var i int
	if k.zipf != nil {
		i = int(k.zipf.Uint64())
	} else {
		i = k.rnd.IntN(k.n)
	}
	if i < len(k.names) {
		return k.names[i]
	}
	return keyName(i)
}

func keyNames(n int) []string {
	n = min(n, maxCachedKeys)
	names := make([]string, max(n, 0))
	for i := range names {
		names[i] = keyName(i)
	}
	return names
}
