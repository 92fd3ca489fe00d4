package penalty

import (
	"math"
	"sync"

	"github.com/h3edge/h3edge/limiter"
)

const (
	subWindows      = 8 // a power of two
	maxRejectShards = 256
	// evictScan is how many entries an eviction examines; sweepScan how many an
	// insertion into a half-full shard examines for entries without recent rejections.
	evictScan = 8
	sweepScan = 2
)

// rejectShard is one independently locked part of the rejection counts.
type rejectShard struct {
	mu      sync.Mutex
	index   map[limiter.Source]int32 // source → position in entries
	entries []rejectCount
	hand    int // where the next sweep or eviction looks
	max     int

	// limit is Config.Rejections and sub the length of a counting sub-window
	// (Within/subWindows, ns): kept here so that Reject reads them under the lock it
	// takes anyway, and SetLimits changes them with the counts they apply to.
	limit uint64
	sub   int64

	rejections, evicted uint64
	_                   [64]byte // keep neighbouring shards' locks off one cache line
}

// rejectCount is a source's rejections in the last subWindows sub-windows.
type rejectCount struct {
	key  limiter.Source
	last int64 // the sub-window of the latest rejection
	n    [subWindows]uint32
}

// hit counts a rejection in sub-window sub and returns the rejections in the window
// ending with it. A sub-window earlier than the last one counts as the last one (a
// clock stepping back counts as no time passing).
func (c *rejectCount) hit(sub int64) uint64 {
	if sub > c.last {
		if sub-c.last >= subWindows {
			c.n = [subWindows]uint32{}
		} else {
			for s := c.last + 1; s <= sub; s++ {
				c.n[s&(subWindows-1)] = 0
			}
		}
		c.last = sub
	}
	if i := c.last & (subWindows - 1); c.n[i] < math.MaxUint32 {
		c.n[i]++
	}
	var sum uint64
	for _, v := range c.n {
		sum += uint64(v)
	}
	return sum
}

// rebin moves c from sub-windows of from ns to sub-windows of to ns: each count goes to
// the new sub-window holding the start of its old one, and counts older than the new
// window ending with the last rejection are dropped.
func (c *rejectCount) rebin(from, to int64) {
	old := c.n
	c.n = [subWindows]uint32{}
	last := floorDiv(c.last*from, to)
	for s := c.last - (subWindows - 1); s <= c.last; s++ {
		ns := floorDiv(s*from, to)
		if last-ns >= subWindows {
			continue
		}
		i := ns & (subWindows - 1)
		c.n[i] = uint32(min(uint64(c.n[i])+uint64(old[s&(subWindows-1)]), math.MaxUint32))
	}
	c.last = last
}

// live returns the rejections still inside the window that ends with sub-window sub.
func (c *rejectCount) live(sub int64) uint64 {
	var sum uint64
	for s := max(c.last, sub) - (subWindows - 1); s <= c.last; s++ {
		sum += uint64(c.n[s&(subWindows-1)])
	}
	return sum
}

// add stores a new source with no rejections and returns its position. Once the
// shard is half full it first drops a few entries without recent rejections, and when
// it is full it evicts one.
func (sh *rejectShard) add(k limiter.Source, sub int64) int32 {
	if 2*len(sh.entries) >= sh.max {
		for range min(sweepScan, len(sh.entries)) {
			if sh.hand >= len(sh.entries) {
				sh.hand = 0
			}
			if sh.entries[sh.hand].live(sub) == 0 {
				sh.remove(int32(sh.hand))
			} else {
				sh.hand++
			}
		}
	}
	if len(sh.entries) >= sh.max {
		sh.evict(sub)
	}
	i := int32(len(sh.entries))
	sh.entries = append(sh.entries, rejectCount{key: k, last: sub})
	sh.index[k] = i
	return i
}

// evict drops, among the next evictScan entries, one without recent rejections, else
// the one with the fewest, the oldest of equals.
func (sh *rejectShard) evict(sub int64) {
	best, bestN := -1, uint64(0)
	for range min(evictScan, len(sh.entries)) {
		if sh.hand >= len(sh.entries) {
			sh.hand = 0
		}
		n := sh.entries[sh.hand].live(sub)
		if best < 0 || n < bestN || n == bestN && sh.entries[sh.hand].last < sh.entries[best].last {
			best, bestN = sh.hand, n
		}
		if n == 0 {
			break
		}
		sh.hand++
	}
	if bestN > 0 {
		sh.evicted++
	}
	sh.remove(int32(best))
}

// remove deletes the entry at i, moving the last entry into its place.
func (sh *rejectShard) remove(i int32) {
	delete(sh.index, sh.entries[i].key)
	last := int32(len(sh.entries) - 1)
	if i != last {
		sh.entries[i] = sh.entries[last]
		sh.index[sh.entries[i].key] = i
	}
	sh.entries = sh.entries[:last]
}

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
