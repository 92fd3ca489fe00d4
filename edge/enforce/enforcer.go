// Package enforce decides a request's per-key policies and writes what the decision
// says: the RateLimit-Policy and RateLimit fields on every response of a limited
// request, a 429 when an enforced policy denies, a 503 when the store cannot decide,
// a delay for leaky_bucket's max_delay, and the concurrency units it holds until the
// response ends. A streamed request body is charged to its content-bytes policies as
// it is read (BodyCharge).
//
// All the enforced policies that match a request are decided together and atomically
// (stores.go says how, across the local store and Redis); shadow policies on their
// own, never refusing.
package enforce

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/headers"
	"github.com/h3edge/h3edge/limiter"
)

// GlobalStore is the part of the Redis store the enforcer uses.
type GlobalStore interface {
	limiter.Store
	// FleetSize is the number of edges sharing the store, for on_store_failure: local.
	FleetSize() int
}

// Config is what an Enforcer decides with. Rules, Plans and Local must be set; the
// hooks may be nil.
type Config struct {
	// Rules returns the rule set in force; a reload swaps it.
	Rules func() *rules.Set
	// Plans returns the API-key plans in force.
	Plans func() *identity.Plans
	// Hasher hashes client keys (keys.secret).
	Hasher identity.Hasher
	// Local decides local policies and the stand-ins of global ones.
	Local limiter.Store
	// Global decides global policies. If nil (no redis:), they are decided in Local.
	Global GlobalStore
	// Held counts the concurrency units held now, for inflight{policy}. If nil, New
	// makes one.
	Held *Held

	// ObserveKey sees the client key of every request that matched a policy (the top
	// keys sketch).
	ObserveKey func(limiter.Key)
	// ObserveStore sees every round trip to Global: its duration and error.
	ObserveStore func(d time.Duration, err error)
	// StoreFailed counts a decision of a global policy taken by its on_store_failure:
	// admitted (open is true) or refused.
	StoreFailed func(policy string, open bool)
	// Refused is told of every request a policy refused with 429, after the answer is
	// written: it counts toward the source's ban and is logged. pk is the client key
	// of the first enforced policy; retry is the Retry-After sent.
	Refused func(r *http.Request, now time.Time, violated []string, pk limiter.Key, retry time.Duration)
	// Decided, if set, is told the outcome of every request a policy matched: the
	// client key of its first policy and what was decided ("allowed", "denied",
	// "failed_closed", or "unavailable": the store could not decide), for the access
	// log.
	Decided func(r *http.Request, pk limiter.Key, outcome string)
}

// Enforcer applies the per-key policies to requests. Make it with New; it is safe for
// concurrent use.
type Enforcer struct {
	cfg Config
}

// New returns an Enforcer deciding with c.
func New(c Config) *Enforcer {
	if c.Held == nil {
		c.Held = new(Held)
	}
	return &Enforcer{cfg: c}
}

// Serve decides r's policies at now, the instant the request reached the edge, and
// then passes it to next — or answers it itself (429, 503, 400, or nothing when the
// client went away while delayed). Concurrency units are held until next returns.
func (e *Enforcer) Serve(w http.ResponseWriter, r *http.Request, now time.Time, next http.Handler) {
	rs := e.cfg.Rules()
	if len(rs.Policies) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	d := scratchPool.Get().(*scratch)
	defer scratchPool.Put(d)
	if !e.decide(w, r, now, rs, d) {
		return
	}
	// Concurrency units are held until the response ends or the client goes away.
	defer e.release(r.Context(), &d.batch)
	if charge := e.bodyCharge(r, &d.batch); charge != nil {
		r = r.WithContext(context.WithValue(r.Context(), bodyChargeKey{}, charge))
		r.Body = charge
	}
	next.ServeHTTP(w, r)
}

var scratchPool = sync.Pool{New: func() any {
	d := &scratch{}
	d.reqs, d.rules = make([]limiter.Request, 0, 8), make([]*rules.Rule, 0, 8)
	d.out = make([]limiter.Decision, 0, 16)
	d.shadow.reqs = make([]limiter.Request, 0, 8)
	d.fields.limits, d.fields.buf = make([]headers.Limit, 0, 8), make([]byte, 0, 256)
	return d
}}
