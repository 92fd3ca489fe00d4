package redisstore

import (
	"sync"
	"time"

	"github.com/h3edge/h3edge/limiter"
)

// negCache remembers denials: a batch denied with RetryAfter T (the longest of its
// denying policies) is denied again locally until T, without a round trip, if the
// same policies (by identity: name and parameters, so a reload that changes a policy
// never reuses a verdict), keys and costs come back. Until T, Redis would deny that
// batch too — its state can only move further from admitting it, since other edges
// only charge more — so the cache never admits what Redis would deny and never
// denies what Redis would admit, except after a refund (leased units returning, a
// refunded Redis Cluster slot), which can make units available before T. Denials
// with RetryAfter 0 (concurrency: units return on release) are not remembered, and
// none is remembered longer than negMaxTTL.
type negCache struct {
	shards [16]negShard
	max    int // entries per shard
}

const negMaxTTL = time.Minute

type negShard struct {
	mu sync.Mutex
	m  map[uint64]*negEntry
}

type negEntry struct {
	at, until int64 // instants (ns, Redis clock)
	sig       []negSig
	dec       []limiter.Decision
}

type negSig struct {
	id   uint64
	key  limiter.Key
	cost int64
}

func newNegCache(size int) *negCache {
	c := &negCache{max: max(size/16, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]*negEntry)
	}
	return c
}

// negHash hashes the batch's identity.
func negHash(reqs []limiter.Request, infos []*policyInfo) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	mix := func(v uint64) {
		h ^= v
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	for i := range reqs {
		r := &reqs[i]
		mix(infos[i].params.ID)
		for j := 0; j < len(r.Key); j += 8 {
			mix(uint64(r.Key[j]) | uint64(r.Key[j+1])<<8 | uint64(r.Key[j+2])<<16 | uint64(r.Key[j+3])<<24 |
				uint64(r.Key[j+4])<<32 | uint64(r.Key[j+5])<<40 | uint64(r.Key[j+6])<<48 | uint64(r.Key[j+7])<<56)
		}
		mix(uint64(r.Cost))
	}
	return h
}

// lookup appends the remembered decisions for the batch if it is denied at t.
func (c *negCache) lookup(reqs []limiter.Request, infos []*policyInfo, t int64, out []limiter.Decision) ([]limiter.Decision, bool) {
	h := negHash(reqs, infos)
	sh := &c.shards[h>>60]
	sh.mu.Lock()
	e := sh.m[h]
	if e == nil || t >= e.until || len(e.sig) != len(reqs) {
		sh.mu.Unlock()
		return out, false
	}
	for i := range reqs {
		if s := e.sig[i]; s.id != infos[i].params.ID || s.key != reqs[i].Key || s.cost != reqs[i].Cost {
			sh.mu.Unlock()
			return out, false
		}
	}
	elapsed := time.Duration(max(t-e.at, 0))
	for i, d := range e.dec {
		d.Policy = reqs[i].Policy
		if d.RetryAfter != limiter.Never {
			d.RetryAfter = max(d.RetryAfter-elapsed, 0)
		}
		d.ResetAfter = max(d.ResetAfter-elapsed, 0)
		out = append(out, d)
	}
	sh.mu.Unlock()
	return out, true
}

// put remembers a denied batch decided at t.
func (c *negCache) put(reqs []limiter.Request, infos []*policyInfo, t int64, dec []limiter.Decision) {
	var wait time.Duration
	for _, d := range dec {
		if d.Allowed {
			continue
		}
		if d.RetryAfter <= 0 {
			return
		}
		wait = max(wait, d.RetryAfter)
	}
	if wait <= 0 {
		return
	}
	wait = min(wait, negMaxTTL)
	e := &negEntry{at: t, until: t + int64(wait), sig: make([]negSig, len(reqs)), dec: append([]limiter.Decision(nil), dec...)}
	for i := range reqs {
		e.sig[i] = negSig{id: infos[i].params.ID, key: reqs[i].Key, cost: reqs[i].Cost}
	}
	h := negHash(reqs, infos)
	sh := &c.shards[h>>60]
	sh.mu.Lock()
	if len(sh.m) >= c.max {
		// Drop what expired; if nothing did, drop some at random (map order).
		n := 0
		for k, old := range sh.m {
			if old.until <= t || n < 8 && len(sh.m) >= c.max {
				delete(sh.m, k)
				n++
			}
			if n >= 64 {
				break
			}
		}
	}
	sh.m[h] = e
	sh.mu.Unlock()
}
