package enforce

import (
	"context"
	"errors"
	"time"

	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/limiter"
)

// Where a request's enforced policies are decided: local ones in this edge's memory
// (Config.Local), global ones in Redis (Config.Global). All of them together are
// all-or-nothing:
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

// verdict is what deciding a batch came to.
type verdict uint8

const (
	// allowed: every policy admitted the batch; its units are held (batch.held).
	allowed verdict = iota
	// denied: some policy refused; nothing is charged, and batch.out says why.
	denied
	// closed: Redis could not decide and some global policy fails closed (503).
	closed
	// failed: a store could not decide for another reason (503).
	failed
)

// String names v as the access log's decision field does.
func (v verdict) String() string {
	switch v {
	case allowed:
		return "allowed"
	case denied:
		return "denied"
	case closed:
		return "failed_closed"
	}
	return "unavailable"
}

// outcome is the result of decideEnforced.
type outcome struct {
	verdict verdict
	closed  []string // the policies that failed closed (verdict closed)
	err     error    // why the store could not decide (verdict failed)
}

// result turns a store's (allowed, err) into an outcome.
func result(ok bool, err error) outcome {
	switch {
	case err != nil:
		return outcome{verdict: failed, err: err}
	case ok:
		return outcome{verdict: allowed}
	}
	return outcome{verdict: denied}
}

// decideEnforced decides b.reqs at now into b.out (one decision per request, in
// order) and records in b.held which units are held where.
func (e *Enforcer) decideEnforced(ctx context.Context, now time.Time, b *batch) outcome {
	b.out = b.out[:0]
	b.held.local, b.held.global = b.held.local[:0], b.held.global[:0]
	if e.cfg.Global == nil || !b.anyGlobal {
		var ok bool
		var err error
		b.out, ok, err = e.cfg.Local.Decide(ctx, now, b.reqs, b.out)
		if ok {
			b.held.local = append(b.held.local, b.reqs...)
		}
		return result(ok, err)
	}
	b.splitByStore()
	sp := &b.split
	// 1. Read the local policies.
	if len(sp.lreq) > 0 {
		if o, decided := e.readLocal(ctx, now, b); decided {
			return o
		}
	}
	// 2. Decide the global policies in Redis.
	global, ok, err := e.cfg.Global.Decide(ctx, now, sp.greq, sp.decisions[:0])
	sp.decisions = global
	if e.cfg.ObserveStore != nil {
		e.cfg.ObserveStore(time.Since(now), err)
	}
	if err != nil {
		return e.fallBack(ctx, now, b, err)
	}
	for i, j := range sp.gidx {
		b.out[j] = global[i]
	}
	if !ok {
		return outcome{verdict: denied}
	}
	b.held.global = append(b.held.global, sp.greq...)
	// 3. Charge the local policies.
	if len(sp.lreq) > 0 {
		return e.chargeLocal(ctx, now, b)
	}
	return outcome{verdict: allowed}
}

// splitByStore sorts b's requests into its local and global parts, each with its
// indices in b, and gives b.out one (zero) decision per request to fill.
func (b *batch) splitByStore() {
	for range b.reqs {
		b.out = append(b.out, limiter.Decision{})
	}
	sp := &b.split
	sp.lreq, sp.lidx, sp.greq, sp.gidx = sp.lreq[:0], sp.lidx[:0], sp.greq[:0], sp.gidx[:0]
	for i, ru := range b.rules {
		if ru.Global {
			sp.greq, sp.gidx = append(sp.greq, b.reqs[i]), append(sp.gidx, i)
		} else {
			sp.lreq, sp.lidx = append(sp.lreq, b.reqs[i]), append(sp.lidx, i)
		}
	}
}

// readLocal is step 1: it reads the local policies of b without charging them. If
// one cannot admit the request it decides them for real — a denial that charges
// nothing and says why — marks the global ones as not asked, and reports decided.
func (e *Enforcer) readLocal(ctx context.Context, now time.Time, b *batch) (o outcome, decided bool) {
	sp := &b.split
	sp.tmp = append(sp.tmp[:0], sp.lreq...)
	for i := range sp.tmp {
		sp.tmp[i].Cost = 0
	}
	read, _, err := e.cfg.Local.Decide(ctx, now, sp.tmp, sp.decisions[:0])
	sp.decisions = read
	if err != nil {
		return outcome{verdict: failed, err: err}, true
	}
	fits := true
	for i := range sp.lreq {
		if sp.lreq[i].Cost > read[i].Remaining {
			fits = false
		}
	}
	if fits {
		for i, j := range sp.lidx {
			b.out[j] = read[i]
		}
		return outcome{}, false
	}
	local, _, err := e.cfg.Local.Decide(ctx, now, sp.lreq, sp.decisions[:0])
	sp.decisions = local
	for i, j := range sp.lidx {
		b.out[j] = local[i]
	}
	for _, j := range sp.gidx {
		b.out[j] = limiter.Decision{Allowed: true, Policy: b.reqs[j].Policy} // not asked
		b.skip |= 1 << j
	}
	if err != nil {
		return outcome{verdict: failed, err: err}, true
	}
	return outcome{verdict: denied}, true
}

// chargeLocal is step 3: it charges the local policies of b, whose global ones Redis
// admitted; if a local one refuses after all, what Redis holds is given back.
func (e *Enforcer) chargeLocal(ctx context.Context, now time.Time, b *batch) outcome {
	sp := &b.split
	local, ok, err := e.cfg.Local.Decide(ctx, now, sp.lreq, sp.decisions[:0])
	sp.decisions = local
	for i, j := range sp.lidx {
		b.out[j] = local[i]
	}
	if err != nil || !ok {
		e.cfg.Global.Release(context.WithoutCancel(ctx), b.held.global)
		b.held.global = b.held.global[:0]
		return result(ok, err)
	}
	b.held.local = append(b.held.local, sp.lreq...)
	return outcome{verdict: allowed}
}

// fallBack decides a batch whose global policies Redis could not decide, each as its
// on_store_failure says.
func (e *Enforcer) fallBack(ctx context.Context, now time.Time, b *batch, cause error) outcome {
	sp := &b.split
	var names []string
	for _, j := range sp.gidx {
		if ru := b.rules[j]; ru.OnFailure == rules.Closed {
			names = append(names, ru.Name)
		}
	}
	if len(names) > 0 {
		for _, j := range sp.gidx {
			e.storeFailed(b.rules[j].Name, false)
		}
		return outcome{verdict: closed, closed: names}
	}
	// Every global policy is decided here instead, together with the local ones.
	sp.tmp = append(sp.tmp[:0], sp.lreq...)
	fleet := e.cfg.Global.FleetSize()
	for _, j := range sp.gidx {
		ru := b.rules[j]
		req := b.reqs[j]
		req.Policy = ru.Fallback(fleet)
		sp.tmp = append(sp.tmp, req)
		e.storeFailed(ru.Name, true)
	}
	out, ok, err := e.cfg.Local.Decide(ctx, now, sp.tmp, sp.decisions[:0])
	sp.decisions = out
	if err != nil {
		return outcome{verdict: failed, err: errors.Join(cause, err)}
	}
	for i, j := range sp.lidx {
		b.out[j] = out[i]
	}
	for i, j := range sp.gidx {
		dec := out[len(sp.lidx)+i]
		dec.Policy = b.reqs[j].Policy
		b.out[j] = dec
	}
	if ok {
		b.held.local = append(b.held.local, sp.tmp...)
	}
	return result(ok, nil)
}

func (e *Enforcer) storeFailed(policy string, open bool) {
	if e.cfg.StoreFailed != nil {
		e.cfg.StoreFailed(policy, open)
	}
}

// release gives back the concurrency units b holds, in the store that holds them.
func (e *Enforcer) release(ctx context.Context, b *batch) {
	if len(b.held.local) > 0 && hasConcurrency(b.held.local) {
		e.cfg.Held.Add(b.held.local, -1)
		e.cfg.Local.Release(context.WithoutCancel(ctx), b.held.local)
	}
	if len(b.held.global) > 0 && hasConcurrency(b.held.global) {
		e.cfg.Held.Add(b.held.global, -1)
		e.cfg.Global.Release(context.WithoutCancel(ctx), b.held.global)
	}
	b.held.local, b.held.global = b.held.local[:0], b.held.global[:0]
}

func hasConcurrency(reqs []limiter.Request) bool {
	for i := range reqs {
		if reqs[i].Policy.Algorithm == limiter.Concurrency {
			return true
		}
	}
	return false
}
