package edge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/headers"
	"github.com/h3edge/h3edge/limiter"
)

// rules is the compiled form of the policies of one configuration. It is immutable; a
// reload swaps in a new one.
type rules struct {
	policies []*rule
	chains   [][]keySource // distinct key chains; rule.chain indexes them
	// credential lists the non-ip key sources of all chains, in order: the first that
	// yields a value is the request's API key for the plan lookup.
	credential  []keySource
	byPlan      bool // some rule matches by plan
	defaultPlan string
	legacy      bool
	sources     limiter.SourcePrefix // what the ip key and the top sources count
	trusted     []netip.Prefix
	// leases maps global policies to their lease option, for the Redis store.
	leases map[*limiter.Policy]int64

	// policyFields caches the RateLimit-Policy value per set of matched enforced rules
	// (a bit mask over policies): it is stable, so it is built once.
	policyFields sync.Map // uint64 → []string
}

// rule is one compiled policy.
type rule struct {
	name       string
	lim        *limiter.Policy
	hdr        headers.Policy
	shadow     bool
	unit       string
	pathPrefix string
	methods    []string
	host       string
	plan       string
	chain      int
	bit        uint64

	// Global policies are decided in Redis; while it cannot decide, onFailure says what
	// happens: "closed" (503), "open" (the local backstop, same quota) or "local"
	// (quota ÷ fleet size, made on demand in divided).
	global    bool
	onFailure string
	backstop  *limiter.Policy
	divided   atomic.Pointer[dividedPolicy]
	lease     int64
}

// maxPolicies bounds the policies of one configuration (a request's matched set is a
// 64-bit mask).
const maxPolicies = 64

// compileRules turns the configuration's policies into rules. prev, if not nil, is the
// rule set being replaced: a policy whose name and parameters did not change keeps its
// limiter.Policy, so its counters and clients' state carry over a reload.
func compileRules(cfg *config.Config, prev *rules) (*rules, error) {
	if len(cfg.Policies) > maxPolicies {
		return nil, fmt.Errorf("edge: at most %d policies", maxPolicies)
	}
	rs := &rules{
		leases:      map[*limiter.Policy]int64{},
		defaultPlan: cfg.Keys.DefaultPlan,
		legacy:      cfg.LegacyHeaders,
		sources:     limiter.SourcePrefix{IPv4: cfg.IP.IPv4Prefix, IPv6: cfg.IP.IPv6Prefix},
		trusted:     cfg.TrustedProxyPrefixes(),
	}
	chainIndex := map[string]int{}
	seenCred := map[keySource]bool{}
	for i, p := range cfg.Policies {
		lp := limiter.Policy{
			Name:      p.Name,
			Algorithm: limiter.Algorithm(p.Algorithm),
			Quota:     p.Quota,
			Window:    p.Window,
			MaxDelay:  p.MaxDelay,
		}
		if p.Mode == "shadow" {
			// Shadow state is its own: a shadow policy never shares units with an
			// enforced one of the same name.
			lp.Name = "shadow:" + p.Name
		}
		lim, err := limiter.NewPolicy(lp)
		if err != nil {
			return nil, fmt.Errorf("edge: policies[%d] (%s): %w", i, p.Name, err)
		}
		if prev != nil {
			for _, old := range prev.policies {
				if old.lim.Name == lim.Name && old.lim.Algorithm == lim.Algorithm && old.lim.Quota == lim.Quota &&
					old.lim.Window == lim.Window && old.lim.MaxDelay == lim.MaxDelay {
					lim = old.lim
				}
			}
		}
		key := strings.Join(p.Key, ",")
		ci, ok := chainIndex[key]
		if !ok {
			ci = len(rs.chains)
			chainIndex[key] = ci
			var chain []keySource
			for _, k := range p.Key {
				ks := parseKeySource(k)
				chain = append(chain, ks)
				if ks.kind != "ip" && !seenCred[ks] {
					seenCred[ks] = true
					rs.credential = append(rs.credential, ks)
				}
			}
			rs.chains = append(rs.chains, chain)
		}
		var methods []string
		for _, m := range p.Match.Methods {
			methods = append(methods, strings.ToUpper(m))
		}
		r := &rule{
			name:       p.Name,
			lim:        lim,
			hdr:        headers.Policy{Name: p.Name, Quota: p.Quota, Window: p.Window, Unit: headers.Unit(p.Unit)},
			shadow:     p.Mode == "shadow",
			unit:       p.Unit,
			pathPrefix: p.Match.PathPrefix,
			methods:    methods,
			host:       strings.ToLower(p.Match.Host),
			plan:       p.Match.Plan,
			chain:      ci,
			bit:        1 << i,
		}
		if r.unit == "concurrent-requests" {
			r.hdr.Window = 0
		}
		if p.Scope == "global" {
			r.global, r.onFailure, r.lease = true, p.OnStoreFailure, p.Lease
			lp.Name = "backstop:" + lp.Name
			if r.backstop, err = limiter.NewPolicy(lp); err != nil {
				return nil, fmt.Errorf("edge: policies[%d] (%s): %w", i, p.Name, err)
			}
			rs.leases[lim] = p.Lease
		}
		if r.plan != "" {
			rs.byPlan = true
		}
		rs.policies = append(rs.policies, r)
	}
	// Every policy set's field must serialize: check the whole set once.
	all := make([]headers.Policy, len(rs.policies))
	for i, r := range rs.policies {
		all[i] = r.hdr
	}
	if _, err := headers.PolicyField(all); err != nil && len(all) > 0 {
		return nil, fmt.Errorf("edge: policies: %w", err)
	}
	return rs, nil
}

// matches reports whether r applies to the request.
func (r *rule) matches(req *http.Request, host, plan string) bool {
	if r.pathPrefix != "" && !strings.HasPrefix(req.URL.Path, r.pathPrefix) {
		return false
	}
	if len(r.methods) > 0 && !slices.Contains(r.methods, req.Method) {
		return false
	}
	if r.host != "" && r.host != host {
		return false
	}
	return r.plan == "" || r.plan == plan
}

// policyField returns the RateLimit-Policy field value for the enforced rules in mask.
func (rs *rules) policyField(mask uint64) []string {
	if v, ok := rs.policyFields.Load(mask); ok {
		return v.([]string)
	}
	var ps []headers.Policy
	for _, r := range rs.policies {
		if mask&r.bit != 0 {
			ps = append(ps, r.hdr)
		}
	}
	f, _ := headers.PolicyField(ps) // validated in compileRules
	v := []string{f}
	rs.policyFields.Store(mask, v)
	return v
}

// decision is the per-request scratch space of enforce, pooled.
type decision struct {
	reqs      []limiter.Request
	rules     []*rule
	anyGlobal bool
	shadow    []limiter.Request
	shadowG   []bool // shadow[i] is a global policy
	out       []limiter.Decision
	// skip marks decisions (by index) that were not made and stay out of the fields.
	skip   uint64
	limits []headers.Limit
	limRul []int // limits[i] is for rules[limRul[i]]
	keys   []limiter.Key
	// The request's address key and last credential key, hashed once (clientKey).
	ipKey, credKey     limiter.Key
	credVal            string
	ipKeyOK, credKeyOK bool
	keyOK              []bool
	// The connection's memo of hashed keys, looked up once per request (memoOK).
	memo   *connMemo
	memoOK bool
	buf    []byte

	// Scratch space of decideEnforced: the local and global parts of reqs with their
	// indices, and the units held in each store until the response ends.
	lreq, greq            []limiter.Request
	lidx, gidx            []int
	tmp                   []limiter.Request
	scratch               []limiter.Decision
	heldLocal, heldGlobal []limiter.Request
}

// connMemo returns r's connection memo, looked up once per request.
func (d *decision) connMemo(r *http.Request) *connMemo {
	if !d.memoOK {
		d.memo, d.memoOK = memoOf(r), true
	}
	return d.memo
}

var decisionPool = sync.Pool{New: func() any {
	return &decision{
		reqs: make([]limiter.Request, 0, 8), rules: make([]*rule, 0, 8), shadow: make([]limiter.Request, 0, 8),
		out: make([]limiter.Decision, 0, 16), limits: make([]headers.Limit, 0, 8), buf: make([]byte, 0, 256),
	}
}}

// enforce decides every policy that matches the request — all enforced ones together,
// all-or-nothing, then the shadow ones on their own — and answers 429 when an enforced
// policy denies. Responses of limited routes carry RateLimit-Policy and RateLimit.
func (s *Server) enforce(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs := s.rules.Load()
		if len(rs.policies) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		d := decisionPool.Get().(*decision)
		defer decisionPool.Put(d)
		if !s.decide(w, r, rs, d) {
			return
		}
		// Concurrency units are held until the response ends or the client goes away.
		defer s.release(r.Context(), d)
		if charge := s.bodyCharge(r, rs, d); charge != nil {
			r = r.WithContext(context.WithValue(r.Context(), bodyChargeKey{}, charge))
			r.Body = charge
		}
		next.ServeHTTP(w, r)
	})
}

// decide runs the decision for one request and writes the fields. It returns false when
// it has answered the request itself (429, 400, or a client gone while delayed).
func (s *Server) decide(w http.ResponseWriter, r *http.Request, rs *rules, d *decision) bool {
	d.reqs, d.rules, d.shadow, d.out, d.limits = d.reqs[:0], d.rules[:0], d.shadow[:0], d.out[:0], d.limits[:0]
	d.limRul = d.limRul[:0]
	d.keys, d.keyOK, d.shadowG, d.anyGlobal, d.skip = d.keys[:0], d.keyOK[:0], d.shadowG[:0], false, 0
	d.ipKeyOK, d.credKeyOK, d.credVal, d.memo, d.memoOK = false, false, "", nil, false
	d.heldLocal, d.heldGlobal = d.heldLocal[:0], d.heldGlobal[:0]
	for range rs.chains {
		d.keys = append(d.keys, limiter.Key{})
		d.keyOK = append(d.keyOK, false)
	}

	plan := rs.defaultPlan
	if rs.byPlan {
		for _, ks := range rs.credential {
			if v, ok := ks.value(r); ok {
				if config.ValidKey(v) {
					if p, ok := s.plans.Load().byKey[d.connMemo(r).credKey(s.hasher, v)]; ok {
						plan = p
					}
				}
				break
			}
		}
	}
	host := r.Host
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
		host = h
	}
	host = strings.ToLower(host)

	var mask uint64
	for _, ru := range rs.policies {
		if !ru.matches(r, host, plan) {
			continue
		}
		if !d.keyOK[ru.chain] {
			k, err := s.clientKey(r, rs, rs.chains[ru.chain], d)
			if err != nil {
				writeProblem(w, http.StatusBadRequest, "Bad Request", err.Error())
				return false
			}
			d.keys[ru.chain], d.keyOK[ru.chain] = k, true
		}
		req := limiter.Request{Policy: ru.lim, Key: d.keys[ru.chain], Cost: 1}
		if ru.unit == "content-bytes" {
			req.Cost = max(r.ContentLength, 0)
		}
		if ru.shadow {
			d.shadow = append(d.shadow, req)
			d.shadowG = append(d.shadowG, ru.global && s.global != nil)
			continue
		}
		d.reqs = append(d.reqs, req)
		d.rules = append(d.rules, ru)
		d.anyGlobal = d.anyGlobal || ru.global
		mask |= ru.bit
	}
	if len(d.reqs) == 0 && len(d.shadow) == 0 {
		return true
	}

	now := requestTime(w)
	ctx := r.Context()
	if len(d.reqs) > 0 {
		s.metrics.observeKey(d.reqs[0].Key)
	} else {
		s.metrics.observeKey(d.shadow[0].Key)
	}
	allowed, closed, err := s.decideEnforced(ctx, now, d)
	if err != nil && len(closed) == 0 {
		writeProblem(w, http.StatusServiceUnavailable, "Service Unavailable", "the rate limiter could not decide")
		return false
	}
	s.decideShadow(ctx, now, d)
	// Every unit held from here on is given back by release, which uncounts it.
	s.held.add(d.heldLocal, 1)
	s.held.add(d.heldGlobal, 1)
	if len(closed) > 0 {
		s.release(ctx, d)
		s.failClosed(w, closed)
		return false
	}
	out := d.out

	var delay time.Duration
	if len(d.reqs) > 0 {
		h := w.Header()
		polName, limName := headers.PolicyFieldName, headers.LimitFieldName
		if r.ProtoMajor >= 2 {
			polName, limName = headers.PolicyFieldNameLower, headers.LimitFieldNameLower
		}
		h[polName] = rs.policyField(mask)
		for i, ru := range d.rules {
			if d.skip&(1<<i) != 0 {
				continue
			}
			dec := &out[i]
			d.limRul = append(d.limRul, i)
			// Filled in place: appending a whole Limit would copy its pointers
			// under the GC's bulk write barrier.
			d.limits = append(d.limits, headers.Limit{})
			l := &d.limits[len(d.limits)-1]
			l.Name = ru.name
			l.Remaining, l.Reset = dec.Remaining, dec.ResetAfter
			l.Concurrency = ru.unit == "concurrent-requests"
			l.PartitionKey = d.reqs[i].Key[:8] // d.reqs outlives the field: no copy
			delay = max(delay, dec.Delay)
		}
		d.buf = headers.AppendLimitField(d.buf[:0], d.limits)
		h[limName] = []string{string(d.buf)}
		if rs.legacy && len(d.limits) > 0 {
			i := headers.Closest(d.limits)
			headers.SetLegacy(h, d.rules[d.limRul[i]].hdr.Quota, d.limits[i])
		}
	}
	if !allowed {
		s.release(ctx, d)
		s.deny(w, d)
		s.reject(r, now)
		return false
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			s.release(ctx, d)
			return false
		}
	}
	return true
}

// decideShadow decides the shadow policies on their own, each in its store; they
// never deny, and what they admit is held like the rest until the response ends.
// Failures of the store are ignored: a shadow policy has nothing to fall back to.
func (s *Server) decideShadow(ctx context.Context, now time.Time, d *decision) {
	if len(d.shadow) == 0 {
		return
	}
	d.tmp, d.greq = d.tmp[:0], d.greq[:0]
	for i, req := range d.shadow {
		if d.shadowG[i] {
			d.greq = append(d.greq, req)
		} else {
			d.tmp = append(d.tmp, req)
		}
	}
	if len(d.tmp) > 0 {
		var ok bool
		var err error
		if d.scratch, ok, err = s.store.Decide(ctx, now, d.tmp, d.scratch[:0]); ok && err == nil {
			d.heldLocal = append(d.heldLocal, d.tmp...)
		}
	}
	if len(d.greq) > 0 {
		var ok bool
		var err error
		if d.scratch, ok, err = s.global.Decide(ctx, now, d.greq, d.scratch[:0]); ok && err == nil {
			d.heldGlobal = append(d.heldGlobal, d.greq...)
		}
	}
}

// failClosed answers 503 for policies whose store could not decide and whose
// on_store_failure is closed.
func (s *Server) failClosed(w http.ResponseWriter, policies []string) {
	h := w.Header()
	h[headers.RetryAfterFieldName] = []string{"1"}
	h["Content-Type"] = []string{headers.ProblemContentType}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(headers.AppendTemporaryReducedCapacity(nil, "the quota store is unavailable", policies))
}

// deny answers 429 with Retry-After and a problem document naming the violated
// policies.
func (s *Server) deny(w http.ResponseWriter, d *decision) {
	var retry time.Duration
	var violated []string
	var denying []headers.Limit
	for i, ru := range d.rules {
		dec := &d.out[i]
		if dec.Allowed {
			continue
		}
		violated = append(violated, ru.name)
		denying = append(denying, headers.Limit{Name: ru.name, Remaining: dec.Remaining, Reset: dec.ResetAfter,
			Concurrency: ru.unit == "concurrent-requests"})
		ra := dec.RetryAfter
		if ra == limiter.Never {
			// The request can never fit (e.g. a body larger than the quota): a window
			// from now is as good an answer as any, and the detail says why.
			ra = max(ru.lim.Window, time.Second)
		}
		retry = max(retry, ra)
	}
	retry = headers.RetryAfter(denying, retry)
	h := w.Header()
	h[headers.RetryAfterFieldName] = []string{string(headers.AppendRetryAfter(nil, retry))}
	h["Content-Type"] = []string{headers.ProblemContentType}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(headers.AppendQuotaExceeded(nil, "quota exceeded for policy "+strings.Join(violated, ", "), violated))
	if ok, suppressed := s.rejectLog.allow(time.Now()); ok {
		s.log.Info("request refused", "policies", violated, "pk", fmt.Sprintf("%x", d.reqs[0].Key[:8]),
			"retry_after", retry, "suppressed", suppressed)
	}
}

// clientKey resolves a chain: the first source that yields a value.
// Chains that resolve to the same address or the same credential within one request
// reuse its hash (d memoizes the last of each): a hash is most of a key's cost.
func (s *Server) clientKey(r *http.Request, rs *rules, chain []keySource, d *decision) (limiter.Key, error) {
	for _, ks := range chain {
		if ks.kind == "ip" {
			if !d.ipKeyOK {
				d.ipKey, d.ipKeyOK = d.connMemo(r).ipKey(s.hasher, rs.sources.Prefix(clientAddr(r, rs.trusted))), true
			}
			return d.ipKey, nil
		}
		if v, ok := ks.value(r); ok {
			if !config.ValidKey(v) {
				return limiter.Key{}, errBadKey
			}
			if !d.credKeyOK || d.credVal != v {
				d.credKey, d.credVal, d.credKeyOK = d.connMemo(r).credKey(s.hasher, v), v, true
			}
			return d.credKey, nil
		}
	}
	// A chain without ip that yields nothing: every such request is one anonymous
	// client of that policy, keyed apart from any real key.
	return s.hasher.key('a', ""), nil
}

func hasConcurrency(reqs []limiter.Request) bool {
	for i := range reqs {
		if reqs[i].Policy.Algorithm == limiter.Concurrency {
			return true
		}
	}
	return false
}

// bodyChargeKey is the context key under which a request's bodyCharge travels, so the
// origin can tell a quota cut-off from a broken upload.
type bodyChargeKey struct{}

// bodyCharge charges a request body of unknown length to its content-bytes policies as
// it is read, each read before its bytes go on. The charge is a decision like the
// request's (decideEnforced): local policies in this edge's memory, global ones in Redis,
// all of them together and all-or-nothing, and while Redis cannot decide each global
// policy follows its on_store_failure. So a fleet admits at most a global policy's
// quota of bytes however a key's bodies are spread over its edges. Once a read is
// refused, the body fails.
//
// Every read that yields bytes is one decision, so with a global policy one Redis round
// trip per read, and the bound is exact: the fleet admits at most the quota, and a read
// the quota cannot hold in full is refused, never split (a body may so stop up to one
// read short of it). A policy with lease: N takes N units ahead and spends them here
// without a round trip, with the bound that option states (redisstore.Config.Lease).
//
// Read is not safe for concurrent use; denied may be loaded by any goroutine, and once
// it is set the refusal's fields (d.out, closed, failed) no longer change.
type bodyCharge struct {
	io.ReadCloser
	s   *Server
	ctx context.Context
	// d holds the content-bytes rules and their requests. It is the charge's own, not
	// the request's pooled one: a proxy may read the body after the handler returned.
	d decision
	// closed lists the policies that failed closed; failed says the store could not
	// decide for another reason (both answer 503).
	closed []string
	failed bool
	denied atomic.Bool
}

// errBodyQuota ends a body read that crossed a content-bytes quota.
var errBodyQuota = fmt.Errorf("edge: request body exceeds the content-bytes quota")

// bodyCharge returns the charging wrapper for r's body, or nil when nothing is charged
// as it streams (no content-bytes policy, or a known Content-Length charged up front).
func (s *Server) bodyCharge(r *http.Request, rs *rules, d *decision) *bodyCharge {
	if r.ContentLength >= 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	var b *bodyCharge
	for i, ru := range d.rules {
		if ru.unit != "content-bytes" {
			continue
		}
		if b == nil {
			b = &bodyCharge{ReadCloser: r.Body, s: s, ctx: context.WithoutCancel(r.Context())}
		}
		b.d.reqs = append(b.d.reqs, d.reqs[i])
		b.d.rules = append(b.d.rules, ru)
		b.d.anyGlobal = b.d.anyGlobal || ru.global
	}
	return b
}

func (b *bodyCharge) Read(p []byte) (int, error) {
	if b.denied.Load() {
		return 0, errBodyQuota
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		d := &b.d
		for i := range d.reqs {
			d.reqs[i].Cost = int64(n)
		}
		d.skip = 0
		allowed, closed, derr := b.s.decideEnforced(b.ctx, time.Now(), d)
		if !allowed || derr != nil || len(closed) > 0 {
			b.closed, b.failed = closed, derr != nil && len(closed) == 0
			b.denied.Store(true)
			return 0, errBodyQuota
		}
	}
	return n, err
}

// bodyQuotaExceeded reports whether r's body was cut off by a content-bytes quota.
func bodyQuotaExceeded(r *http.Request) bool {
	bc, ok := r.Context().Value(bodyChargeKey{}).(*bodyCharge)
	return ok && bc.denied.Load()
}

// writeBodyQuota answers a request whose streamed body was cut off: 429 naming the
// policies that refused it, or 503 when the store could not decide.
func writeBodyQuota(w http.ResponseWriter, r *http.Request) {
	bc := r.Context().Value(bodyChargeKey{}).(*bodyCharge)
	if len(bc.closed) > 0 {
		bc.s.failClosed(w, bc.closed)
		return
	}
	if bc.failed {
		writeProblem(w, http.StatusServiceUnavailable, "Service Unavailable", "the rate limiter could not decide")
		return
	}
	var violated []string
	retry := time.Second
	for i, ru := range bc.d.rules {
		if i < len(bc.d.out) && !bc.d.out[i].Allowed {
			violated = append(violated, ru.name)
			if ra := bc.d.out[i].RetryAfter; ra != limiter.Never {
				retry = max(retry, ra)
			}
		}
	}
	h := w.Header()
	h[headers.RetryAfterFieldName] = []string{strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10)}
	h["Content-Type"] = []string{headers.ProblemContentType}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(headers.AppendQuotaExceeded(nil, "the request body crossed the content-bytes quota", violated))
}
