package edge

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/h3edge/h3edge/limiter"
)

// heldUnits counts the concurrency units this edge holds now, per policy as the
// configuration names it (the inflight{policy} gauge). A unit counts for its policy
// wherever it is held: in Redis, in the local backstop or in the quota divided by the
// fleet size while Redis is away. Units are counted when a decision is final and
// uncounted when release gives them back, from the same lists, so the two always
// balance.
type heldUnits struct {
	byPolicy sync.Map // *limiter.Policy → *atomic.Int64 (fast path)
	mu       sync.Mutex
	byID     map[policyID]*atomic.Int64
}

// add adds sign × cost for every concurrency request of reqs.
func (h *heldUnits) add(reqs []limiter.Request, sign int64) {
	for i := range reqs {
		r := &reqs[i]
		if r.Cost == 0 || r.Policy == nil || r.Policy.Algorithm != limiter.Concurrency {
			continue
		}
		h.counter(r.Policy).Add(sign * r.Cost)
	}
}

func (h *heldUnits) counter(p *limiter.Policy) *atomic.Int64 {
	if c, ok := h.byPolicy.Load(p); ok {
		return c.(*atomic.Int64)
	}
	id := heldID(p.Name)
	h.mu.Lock()
	if h.byID == nil {
		h.byID = map[policyID]*atomic.Int64{}
	}
	c := h.byID[id]
	if c == nil {
		c = new(atomic.Int64)
		h.byID[id] = c
	}
	h.mu.Unlock()
	h.byPolicy.Store(p, c)
	return c
}

// get returns the units held for the policy id.
func (h *heldUnits) get(id policyID) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.byID[id]; c != nil {
		return c.Load()
	}
	return 0
}

// heldID names the configured policy a limiter.Policy stands for: compileRules and
// fallback prefix the name of a global policy's stand-ins ("backstop:", "fallback:")
// and of a shadow policy ("shadow:").
func heldID(name string) policyID {
	for _, p := range []string{"backstop:", "fallback:"} {
		name = strings.TrimPrefix(name, p)
	}
	if n, ok := strings.CutPrefix(name, "shadow:"); ok {
		return policyID{n, true}
	}
	return policyID{name, false}
}
