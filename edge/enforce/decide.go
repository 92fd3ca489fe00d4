package enforce

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/limiter"
)

// decide runs the decision for one request and writes the fields. It returns false
// when it has answered the request itself (429, 503, 400, or a client gone while
// delayed). The steps are DESIGN §1's: the client's plan, the matching policies with
// their client keys, the decision, the fields, then the answer.
func (e *Enforcer) decide(w http.ResponseWriter, r *http.Request, now time.Time, rs *rules.Set, d *scratch) bool {
	d.reset(len(rs.Chains))
	mask, err := e.match(r, rs, d)
	if err != nil {
		answer.Problem(w, r, http.StatusBadRequest, "Bad Request", err.Error())
		return false
	}
	if len(d.reqs) == 0 && len(d.shadow.reqs) == 0 {
		return true
	}
	e.observeKey(d)

	ctx := r.Context()
	o := e.decideEnforced(ctx, now, &d.batch)
	e.decided(r, d, o.verdict)
	if o.verdict == failed {
		answerUndecided(w, r)
		return false
	}
	e.decideShadow(ctx, now, d)
	// Every unit held from here on is given back by release, which uncounts it.
	e.cfg.Held.Add(d.held.local, 1)
	e.cfg.Held.Add(d.held.global, 1)
	if o.verdict == closed {
		e.release(ctx, &d.batch)
		answerClosed(w, r, o.closed)
		return false
	}
	var delay time.Duration
	if len(d.reqs) > 0 {
		delay = writeFields(w.Header(), r, rs, mask, d)
	}
	if o.verdict == denied {
		e.release(ctx, &d.batch)
		e.deny(w, r, now, &d.batch)
		return false
	}
	return delay <= 0 || wait(ctx, delay, func() { e.release(ctx, &d.batch) })
}

// match collects the policies that apply to r into d — enforced ones into d.batch,
// shadow ones into d.shadow — each with its client key, and returns the mask of the
// enforced ones. A client key that cannot be one (identity.ErrBadKey) fails it.
func (e *Enforcer) match(r *http.Request, rs *rules.Set, d *scratch) (mask uint64, err error) {
	plan := e.plan(r, rs, &d.keys)
	host := requestHost(r)
	for _, ru := range rs.Policies {
		if !ru.Matches(r, host, plan) {
			continue
		}
		k := &d.keys
		if !k.ok[ru.Chain] {
			if k.byChain[ru.Chain], err = e.clientKey(r, rs, rs.Chains[ru.Chain], k); err != nil {
				return 0, err
			}
			k.ok[ru.Chain] = true
		}
		req := limiter.Request{Policy: ru.Limiter, Key: k.byChain[ru.Chain], Cost: ru.Cost(r.ContentLength)}
		if ru.Mode == rules.Shadow {
			d.shadow.reqs = append(d.shadow.reqs, req)
			d.shadow.global = append(d.shadow.global, ru.Global && e.cfg.Global != nil)
			continue
		}
		d.reqs = append(d.reqs, req)
		d.rules = append(d.rules, ru)
		d.anyGlobal = d.anyGlobal || ru.Global
		mask |= ru.Bit
	}
	return mask, nil
}

// plan is the plan of r's API key — the first credential source of any chain that
// yields a value — or the default plan. It is looked up only when a rule matches by
// plan.
func (e *Enforcer) plan(r *http.Request, rs *rules.Set, k *keyCache) string {
	if !rs.ByPlan {
		return rs.DefaultPlan
	}
	for _, src := range rs.Credential {
		v, ok := src.Value(r)
		if !ok {
			continue
		}
		if config.ValidKey(v) {
			if p, ok := e.cfg.Plans().Plan(k.memoOf(r).Credential(e.cfg.Hasher, v)); ok {
				return p
			}
		}
		break
	}
	return rs.DefaultPlan
}

// requestHost is r's host as policies match it: lower case, without a port.
func requestHost(r *http.Request) string {
	host := r.Host
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
		host = h
	}
	return strings.ToLower(host)
}

// clientKey resolves a chain: the first source that yields a value. Chains that
// resolve to the same address or the same credential within one request reuse its
// hash (k memoizes the last of each).
func (e *Enforcer) clientKey(r *http.Request, rs *rules.Set, chain []identity.Source, k *keyCache) (limiter.Key, error) {
	h := e.cfg.Hasher
	for _, src := range chain {
		if src.Kind == identity.IP {
			if !k.ipOK {
				k.ip, k.ipOK = k.memoOf(r).Prefix(h, rs.SourcePrefix(identity.ClientAddr(r, rs.Trusted))), true
			}
			return k.ip, nil
		}
		if v, ok := src.Value(r); ok {
			if !config.ValidKey(v) {
				return limiter.Key{}, identity.ErrBadKey
			}
			if !k.credOK || k.credVal != v {
				k.cred, k.credVal, k.credOK = k.memoOf(r).Credential(h, v), v, true
			}
			return k.cred, nil
		}
	}
	// A chain without ip that yields nothing: every such request is one anonymous
	// client of that policy, keyed apart from any real key.
	return h.Anonymous(), nil
}

// firstKey is the client key of the request's first matched policy (enforced ones
// first), the one the top keys and the access log show.
func (d *scratch) firstKey() limiter.Key {
	if len(d.reqs) > 0 {
		return d.reqs[0].Key
	}
	return d.shadow.reqs[0].Key
}

// observeKey shows the request's client key to the top keys.
func (e *Enforcer) observeKey(d *scratch) {
	if e.cfg.ObserveKey != nil {
		e.cfg.ObserveKey(d.firstKey())
	}
}

// decided tells Config.Decided the outcome v of r's enforced policies.
func (e *Enforcer) decided(r *http.Request, d *scratch, v verdict) {
	if e.cfg.Decided != nil {
		e.cfg.Decided(r, d.firstKey(), v.String())
	}
}

// decideShadow decides the shadow policies on their own, each in its store; they
// never deny, and what they admit is held like the rest until the response ends.
// Failures of the store are ignored: a shadow policy has nothing to fall back to.
func (e *Enforcer) decideShadow(ctx context.Context, now time.Time, d *scratch) {
	if len(d.shadow.reqs) == 0 {
		return
	}
	sp := &d.split
	sp.tmp, sp.greq = sp.tmp[:0], sp.greq[:0]
	for i, req := range d.shadow.reqs {
		if d.shadow.global[i] {
			sp.greq = append(sp.greq, req)
		} else {
			sp.tmp = append(sp.tmp, req)
		}
	}
	var ok bool
	var err error
	if len(sp.tmp) > 0 {
		if sp.decisions, ok, err = e.cfg.Local.Decide(ctx, now, sp.tmp, sp.decisions[:0]); ok && err == nil {
			d.held.local = append(d.held.local, sp.tmp...)
		}
	}
	if len(sp.greq) > 0 {
		if sp.decisions, ok, err = e.cfg.Global.Decide(ctx, now, sp.greq, sp.decisions[:0]); ok && err == nil {
			d.held.global = append(d.held.global, sp.greq...)
		}
	}
}

// wait delays an admitted request by delay (leaky_bucket's max_delay). If the client
// goes away first, gone runs and wait reports false.
func wait(ctx context.Context, delay time.Duration, gone func()) bool {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		gone()
		return false
	}
}
