package enforce

import (
	"sync"
	"sync/atomic"

	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/limiter"
)

// Held counts the concurrency units this edge holds now, per policy as the
// configuration names it (the inflight{policy} gauge). A unit counts for its policy
// wherever it is held: in Redis, in the local backstop or in the quota divided by the
// fleet size while Redis is away. Units are counted when a decision is final and
// uncounted when release gives them back, from the same lists, so the two always
// balance. The zero Held is ready; it is safe for concurrent use.
type Held struct {
	byPolicy sync.Map // *limiter.Policy → *atomic.Int64 (fast path)
	mu       sync.Mutex
	byName   map[policyName]*atomic.Int64
}

// policyName is a configured policy: its name and whether it is the shadow one.
type policyName struct {
	name   string
	shadow bool
}

// Add adds sign × cost for every concurrency request of reqs.
func (h *Held) Add(reqs []limiter.Request, sign int64) {
	for i := range reqs {
		r := &reqs[i]
		if r.Cost == 0 || r.Policy == nil || r.Policy.Algorithm != limiter.Concurrency {
			continue
		}
		h.counter(r.Policy).Add(sign * r.Cost)
	}
}

func (h *Held) counter(p *limiter.Policy) *atomic.Int64 {
	if c, ok := h.byPolicy.Load(p); ok {
		return c.(*atomic.Int64)
	}
	name, shadow := rules.PolicyName(p.Name)
	id := policyName{name, shadow}
	h.mu.Lock()
	if h.byName == nil {
		h.byName = map[policyName]*atomic.Int64{}
	}
	c := h.byName[id]
	if c == nil {
		c = new(atomic.Int64)
		h.byName[id] = c
	}
	h.mu.Unlock()
	h.byPolicy.Store(p, c)
	return c
}

// Get returns the units held for the configured policy name (its shadow one when
// shadow is set).
func (h *Held) Get(name string, shadow bool) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.byName[policyName{name, shadow}]; c != nil {
		return c.Load()
	}
	return 0
}
