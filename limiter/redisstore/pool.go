package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/h3edge/h3edge/limiter"
)

// Lease mode (Config.Lease). When a leased policy's request must go to Redis, the
// store asks for cost+N units and falls back to cost if that many are not available
// (decide.lua's want); the N extra units go into a pool that admits later requests of
// the same key locally, with no round trip, until they run out or LeaseHold passes.
// Units left in a pool then return to Redis (refund.lua) — while they still count:
// a fixed_window pool ends with its window, and units returned after their window or
// log entry expired return nothing.
//
// Bound: an edge holds at most N units per key, charged in Redis before they are
// spent. Spending them later than charged is what can over-admit: a token bucket
// that refilled meanwhile, or a sliding window or log from which the charge instant
// has already slid out, counts them as older than they are. So in any window a key
// is admitted at most N × (number of edges) units beyond its quota, and never beyond
// it for fixed_window. Conversely, up to N units per edge may sit unused for up to
// LeaseHold while another edge is denied.

// pool holds one key's leased units on this edge. One decision at a time refills it
// (refilling); others that find it short meanwhile ask Redis for their exact cost, so
// an edge never holds more than N leased units of a key.
type pool struct {
	mu        sync.Mutex
	refilling bool
	units     int64
	until     int64 // ns, Redis clock: spend only before this
	remaining int64 // Remaining that Redis reported at the grant
	resetAt   int64 // when that Remaining next rises (ns), or 0
	ref       refundItem
}

// leasePlan is one decision's use of pools.
type leasePlan struct {
	s      *Store
	taken  []bool  // request served from a pool
	refill []bool  // request refilling its pool
	want   []int64 // units to ask Redis for
	pools  []*pool // the pool a taken request spent from, or the one it refills
	all    bool    // every request was served from a pool
}

// leaseTake serves what it can of reqs from pools, tentatively: giveBack undoes it.
func (s *Store) leaseTake(reqs []limiter.Request, infos []*policyInfo, t int64) *leasePlan {
	n := len(reqs)
	lp := &leasePlan{s: s, taken: make([]bool, n), refill: make([]bool, n), want: make([]int64, n), pools: make([]*pool, n), all: true}
	for i := range reqs {
		r, pi := &reqs[i], infos[i]
		lp.want[i] = r.Cost
		if pi.lease == 0 || r.Cost == 0 {
			lp.all = false
			continue
		}
		key := pi.redisKey(&r.Key)
		s.poolMu.Lock()
		p := s.pools[key]
		if p == nil {
			p = new(pool) // empty until its first refill
			s.pools[key] = p
		}
		s.poolMu.Unlock()
		p.mu.Lock()
		switch {
		case t < p.until && p.units >= r.Cost:
			p.units -= r.Cost
			lp.taken[i] = true
		case !p.refilling:
			p.refilling, lp.refill[i] = true, true
			lp.want[i] = r.Cost + pi.lease
		}
		p.mu.Unlock()
		lp.pools[i] = p
		if !lp.taken[i] {
			lp.all = false
		}
	}
	return lp
}

// giveBack returns the units taken from pools and ends refills (the decision was
// denied or failed).
func (lp *leasePlan) giveBack() {
	if lp == nil {
		return
	}
	for i, p := range lp.pools {
		if p == nil {
			continue
		}
		p.mu.Lock()
		if lp.taken[i] {
			p.units += lp.want[i]
		} else if lp.refill[i] {
			p.refilling = false
		}
		p.mu.Unlock()
		lp.pools[i] = nil
	}
}

// decisions appends the decisions of a batch served entirely from pools.
func (lp *leasePlan) decisions(reqs []limiter.Request, infos []*policyInfo, t int64, out []limiter.Decision) []limiter.Decision {
	for i := range reqs {
		out = append(out, limiter.Decision{})
		lp.fill(&out[len(out)-1], reqs[i].Policy, i, t)
	}
	return out
}

// fill reports a request served from a pool: what the edge still has in hand plus
// what Redis had left at the grant.
func (lp *leasePlan) fill(d *limiter.Decision, p *limiter.Policy, i int, t int64) {
	pl := lp.pools[i]
	pl.mu.Lock()
	*d = limiter.Decision{Allowed: true, Limit: p.Quota, Policy: p,
		Remaining: min(pl.units+pl.remaining, p.Quota), ResetAfter: until(pl.resetAt, t)}
	pl.mu.Unlock()
}

// settle completes an admitted decision: requests served from pools get their
// decisions, and units granted beyond cost fill new pools.
func (lp *leasePlan) settle(s *Store, c *call, reqs []limiter.Request, infos []*policyInfo, dec []limiter.Decision) {
	for i := range reqs {
		if lp.taken[i] {
			lp.fill(&dec[i], reqs[i].Policy, i, c.segs[0].now)
		}
	}
	var old []refundItem
	for _, g := range c.segs {
		for j := range g.items {
			it, r := &g.items[j], &g.results[j]
			p := lp.pools[it.req]
			if p == nil || it.want <= it.cost {
				continue // not a refill
			}
			extra := r.granted - it.cost
			d := &dec[it.req]
			p.mu.Lock()
			p.refilling = false
			if extra > 0 {
				if p.units > 0 { // left from the last grant: given back, then replaced
					ri := p.ref
					ri.units = p.units
					old = append(old, ri)
				}
				p.units, p.remaining = extra, d.Remaining
				p.ref = chargeRefund(it.info, g.keys[it.key], g.slot, g.now, 0, "", r)
				hold := min(s.cfg.LeaseHold, time.Duration(it.info.window))
				p.until = g.now + int64(hold)
				if it.info.code == 'f' {
					w := it.info.window
					p.until = min(p.until, floorDiv(g.now, w)*w+w)
				}
				p.resetAt = 0
				if d.ResetAfter > 0 {
					p.resetAt = g.now + int64(d.ResetAfter)
				}
				d.Remaining = min(d.Remaining+extra, it.info.p.Quota)
			}
			p.mu.Unlock()
		}
	}
	if len(old) > 0 {
		go s.sendRefunds(old)
	}
}

// drain empties the pool and returns how to give its units back.
func (p *pool) drain() (refundItem, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.units <= 0 {
		return refundItem{}, false
	}
	ri := p.ref
	ri.units, p.units = p.units, 0
	return ri, true
}

// poolLoop returns the units of pools past their time.
func (s *Store) poolLoop() {
	defer s.wg.Done()
	t := time.NewTicker(max(s.cfg.LeaseHold/4, 20*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.returnPools(ctx, false)
		cancel()
	}
}

// returnPools gives back the units of expired pools, or of all pools.
func (s *Store) returnPools(ctx context.Context, all bool) {
	now := s.redisNow()
	var items []refundItem
	s.poolMu.Lock()
	for key, p := range s.pools {
		p.mu.Lock()
		expired := p.until <= now && !p.refilling
		p.mu.Unlock()
		if all || expired {
			delete(s.pools, key)
			if ri, ok := p.drain(); ok {
				items = append(items, ri)
			}
		}
	}
	s.poolMu.Unlock()
	if len(items) > 0 && s.br.allow() {
		if err := s.refund(ctx, items); err != nil {
			s.log.Debug("leased units not returned; they count until they expire", "err", err)
		}
	}
}

func (s *Store) sendRefunds(items []refundItem) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.refund(ctx, items); err != nil {
		s.log.Debug("leased units not returned; they count until they expire", "err", err)
	}
}
