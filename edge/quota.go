package edge

import (
	"context"
	"errors"
	"time"

	"github.com/h3edge/h3edge/limiter"
)

// Where a request's enforced policies are decided: local ones in this edge's memory
// (s.store), global ones in Redis (s.global). All of them together are all-or-nothing:
//
//  1. the local policies are read (cost 0, nothing charged); if one of them cannot
//     admit the request it is denied and Redis is not asked;
//  2. the global policies are decided in Redis, all-or-nothing;
//  3. the local policies are charged.
//
// Between 1 and 3 another request of the same key may take the last local unit; then
// this request is denied although Redis charged it. That race needs two requests of
// one key on one edge within a Redis round trip, and errs on the safe side.
//
// When Redis cannot decide in time (error, timeout, open circuit), each global policy
// follows its on_store_failure: closed answers 503; open decides it against a local
// backstop with the same quota; local against a local policy with quota ÷ fleet size.

// globalStore is the part of the Redis store the edge uses.
type globalStore interface {
	limiter.Store
	FleetSize() int
}

// decideEnforced decides d.reqs at now into d.out (one decision per request, in
// order) and records in d which units are held where. closed lists the policies that
// failed closed: the caller answers 503.
func (s *Server) decideEnforced(ctx context.Context, now time.Time, d *decision) (allowed bool, closed []string, err error) {
	d.out = d.out[:0]
	d.heldLocal, d.heldGlobal = d.heldLocal[:0], d.heldGlobal[:0]
	if s.global == nil || !d.anyGlobal {
		d.out, allowed, err = s.store.Decide(ctx, now, d.reqs, d.out)
		if allowed {
			d.heldLocal = append(d.heldLocal, d.reqs...)
		}
		return allowed, nil, err
	}
	for range d.reqs {
		d.out = append(d.out, limiter.Decision{})
	}
	d.lreq, d.lidx, d.greq, d.gidx = d.lreq[:0], d.lidx[:0], d.greq[:0], d.gidx[:0]
	for i, ru := range d.rules {
		if ru.global {
			d.greq, d.gidx = append(d.greq, d.reqs[i]), append(d.gidx, i)
		} else {
			d.lreq, d.lidx = append(d.lreq, d.reqs[i]), append(d.lidx, i)
		}
	}

	// 1. Read the local policies.
	if len(d.lreq) > 0 {
		d.tmp = append(d.tmp[:0], d.lreq...)
		for i := range d.tmp {
			d.tmp[i].Cost = 0
		}
		read, _, err := s.store.Decide(ctx, now, d.tmp, d.scratch[:0])
		d.scratch = read
		if err != nil {
			return false, nil, err
		}
		fits := true
		for i := range d.lreq {
			if d.lreq[i].Cost > read[i].Remaining {
				fits = false
			}
		}
		if !fits {
			// Decide for real: it denies, charges nothing and says why.
			local, _, err := s.store.Decide(ctx, now, d.lreq, d.scratch[:0])
			d.scratch = local
			for i, j := range d.lidx {
				d.out[j] = local[i]
			}
			for _, j := range d.gidx {
				d.out[j] = limiter.Decision{Allowed: true, Policy: d.reqs[j].Policy} // not asked
				d.skip |= 1 << j
			}
			return false, nil, err
		}
		for i, j := range d.lidx {
			d.out[j] = read[i]
		}
	}

	// 2. Decide the global policies in Redis.
	global, gok, gerr := s.global.Decide(ctx, now, d.greq, d.scratch[:0])
	d.scratch = global
	s.metrics.observeStore(time.Since(now), gerr)
	if gerr != nil {
		return s.fallBack(ctx, now, d, gerr)
	}
	for i, j := range d.gidx {
		d.out[j] = global[i]
	}
	if !gok {
		return false, nil, nil
	}
	d.heldGlobal = append(d.heldGlobal, d.greq...)

	// 3. Charge the local policies.
	if len(d.lreq) > 0 {
		local, lok, err := s.store.Decide(ctx, now, d.lreq, d.scratch[:0])
		d.scratch = local
		for i, j := range d.lidx {
			d.out[j] = local[i]
		}
		if err != nil || !lok {
			s.global.Release(context.WithoutCancel(ctx), d.heldGlobal)
			d.heldGlobal = d.heldGlobal[:0]
			return false, nil, err
		}
		d.heldLocal = append(d.heldLocal, d.lreq...)
	}
	return true, nil, nil
}

// fallBack decides a request whose global policies Redis could not decide.
func (s *Server) fallBack(ctx context.Context, now time.Time, d *decision, cause error) (bool, []string, error) {
	var closed []string
	for _, j := range d.gidx {
		if ru := d.rules[j]; ru.onFailure == "closed" {
			closed = append(closed, ru.name)
		}
	}
	if len(closed) > 0 {
		for _, j := range d.gidx {
			s.metrics.storeFailed(d.rules[j].name, false)
		}
		return false, closed, nil
	}
	// Every global policy is decided here instead, together with the local ones.
	d.tmp = append(d.tmp[:0], d.lreq...)
	fleet := s.global.FleetSize()
	for _, j := range d.gidx {
		ru := d.rules[j]
		req := d.reqs[j]
		req.Policy = ru.fallback(fleet)
		d.tmp = append(d.tmp, req)
		s.metrics.storeFailed(ru.name, true)
	}
	out, ok, err := s.store.Decide(ctx, now, d.tmp, d.scratch[:0])
	d.scratch = out
	if err != nil {
		return false, nil, errors.Join(cause, err)
	}
	for i, j := range d.lidx {
		d.out[j] = out[i]
	}
	for i, j := range d.gidx {
		dec := out[len(d.lidx)+i]
		dec.Policy = d.reqs[j].Policy
		d.out[j] = dec
	}
	if ok {
		d.heldLocal = append(d.heldLocal, d.tmp...)
	}
	return ok, nil, nil
}

// release gives back the concurrency units d holds, in the store that holds them.
func (s *Server) release(ctx context.Context, d *decision) {
	if len(d.heldLocal) > 0 && hasConcurrency(d.heldLocal) {
		s.held.add(d.heldLocal, -1)
		s.store.Release(context.WithoutCancel(ctx), d.heldLocal)
	}
	if len(d.heldGlobal) > 0 && hasConcurrency(d.heldGlobal) {
		s.held.add(d.heldGlobal, -1)
		s.global.Release(context.WithoutCancel(ctx), d.heldGlobal)
	}
	d.heldLocal, d.heldGlobal = d.heldLocal[:0], d.heldGlobal[:0]
}

// fallback is the local policy that stands in for a global one while Redis cannot
// decide: the backstop with the same quota (on_store_failure open), or quota ÷ fleet
// size (local).
func (ru *rule) fallback(fleet int) *limiter.Policy {
	if ru.onFailure != "local" || fleet <= 1 {
		return ru.backstop
	}
	if f := ru.divided.Load(); f != nil && f.fleet == fleet {
		return f.p
	}
	np, err := limiter.NewPolicy(limiter.Policy{Name: "fallback:" + ru.name, Algorithm: ru.lim.Algorithm,
		Quota: max(1, ru.lim.Quota/int64(fleet)), Window: ru.lim.Window, MaxDelay: ru.lim.MaxDelay})
	if err != nil {
		return ru.backstop
	}
	ru.divided.Store(&dividedPolicy{fleet: fleet, p: np})
	return np
}

// dividedPolicy is a global policy's quota ÷ fleet size, for one fleet size.
type dividedPolicy struct {
	fleet int
	p     *limiter.Policy
}
