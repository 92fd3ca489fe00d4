package upstream

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sync"
)

// pick returns the target for the next try of a request with client key key, among
// the available targets not in tried (bit i: target i was tried); nil if there is none.
func (p *Pool) pick(key string, tried uint64, now int64) *target {
	var buf [64]*target
	cand := buf[:0]
	for _, t := range p.targets {
		if t.index < 64 && tried&(1<<t.index) != 0 {
			continue
		}
		if t.available(now) {
			cand = append(cand, t)
		}
	}
	switch len(cand) {
	case 0:
		return nil
	case 1:
		return cand[0]
	}
	switch p.cfg.Balance {
	case LeastRequests:
		return leastOfTwo(cand)
	case Hash:
		if key != "" {
			return rendezvous(cand, key)
		}
	}
	return p.rr.next(cand)
}

// smoothRR is nginx's smooth weighted round robin: each pick adds every candidate's
// weight to its credit and takes the one with the most, which then pays the total.
// Weights 3:1 give a a b a, not a a a b.
type smoothRR struct {
	mu     sync.Mutex
	credit map[int]int // by target index
}

func (s *smoothRR) next(cand []*target) *target {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.credit == nil {
		s.credit = map[int]int{}
	}
	var best *target
	total := 0
	for _, t := range cand {
		s.credit[t.index] += t.weight
		total += t.weight
		if best == nil || s.credit[t.index] > s.credit[best.index] {
			best = t
		}
	}
	s.credit[best.index] -= total
	return best
}

// leastOfTwo takes two distinct candidates at random, each in proportion to its
// weight, and returns the one with fewer requests in flight per unit of weight.
func leastOfTwo(cand []*target) *target {
	a := weightedRandom(cand, nil)
	b := weightedRandom(cand, a)
	// a.inflight/a.weight <= b.inflight/b.weight, without division.
	if a.inflight.Load()*int64(b.weight) <= b.inflight.Load()*int64(a.weight) {
		return a
	}
	return b
}

func weightedRandom(cand []*target, except *target) *target {
	total := 0
	for _, t := range cand {
		if t != except {
			total += t.weight
		}
	}
	n := rand.IntN(total)
	for _, t := range cand {
		if t == except {
			continue
		}
		if n -= t.weight; n < 0 {
			return t
		}
	}
	return cand[len(cand)-1]
}

// rendezvous returns the candidate with the highest weighted rendezvous score for
// key (-weight / ln(u), u uniform in (0,1) from the hash of key and target): the
// choice depends only on the key and the candidates, so a target leaving moves only
// the keys it had, and weights shift shares in proportion.
func rendezvous(cand []*target, key string) *target {
	kh := hash64(key)
	var best *target
	bestScore := math.Inf(-1)
	for _, t := range cand {
		h := mix(kh ^ t.hash)
		u := (float64(h>>11) + 0.5) / (1 << 53) // in (0,1)
		score := -float64(t.weight) / math.Log(u)
		if score > bestScore {
			best, bestScore = t, score
		}
	}
	return best
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// mix is splitmix64's finalizer: every input bit moves every output bit, which the
// XOR of two FNV hashes alone does not ensure.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
