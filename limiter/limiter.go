// Package limiter decides whether a request may proceed under one or more rate-limit
// policies, and keeps the per-client state those decisions need, bounded in memory.
//
// A [Policy] names an [Algorithm] and its quota. A [Request] asks for Cost units of one
// policy for one client [Key]. A [Store] decides a batch of requests together and
// all-or-nothing, returning one [Decision] per request; [Local] is the in-memory Store.
//
// Time is always passed in: every decision takes the instant it is made at, and nothing
// on the decision path reads the clock. Instants are handled as int64 nanoseconds since
// the Unix epoch (time.Time.UnixNano), so they must lie between the years 1678 and 2262.
// A clock that steps backwards is tolerated: an instant earlier than one a key has already
// seen counts as no time passing for that key.
//
// The meaning of a Decision is the same for every algorithm:
//   - Remaining is how many units the key has left after this decision: a request is
//     allowed exactly when its cost is at most the Remaining a read reports (for
//     leaky_bucket, how many one-unit requests would still be admitted back to back).
//   - ResetAfter is how long until Remaining next rises by itself (the `t` of the
//     RateLimit field), or 0 when it cannot rise by itself (already at its maximum, or a
//     concurrency policy, which rises only on release).
//   - RetryAfter is how long until a request of the same cost would be allowed: 0 when
//     allowed, [Never] when the cost exceeds what the policy can ever grant, and 0 for a
//     denied concurrency request, whose units come back only when someone releases.
//   - Delay (leaky_bucket only) is how long to hold an allowed request before passing it on.
//
// A cost of 0 is a read: it is always allowed, charges nothing and reports Remaining and
// ResetAfter.
package limiter

import (
	"context"
	"errors"
	"math"
	"time"
)

// Key identifies a client within a policy: the truncated keyed hash of the client key
// (API key, token or address prefix). Hashing is the caller's business; the limiter
// relies on Keys being uniformly distributed.
type Key [16]byte

// Request asks for Cost units of Policy for the client Key.
type Request struct {
	Policy *Policy
	Key    Key
	// Cost is the number of units asked for: 1 for a request, the body size for
	// content-bytes, the units held for concurrency. 0 is a read. Negative is an error.
	Cost int64
}

// Never is the RetryAfter of a request that can never be allowed: its cost exceeds
// the policy's quota (the bucket's capacity for token_bucket and gcra).
const Never time.Duration = math.MaxInt64

// Decision is one policy's verdict on one request.
type Decision struct {
	// Allowed reports whether this policy admits the request. In a batch that another
	// policy denied, an Allowed decision was not charged and reports the uncharged state.
	Allowed bool
	// Remaining is how many units are left after this decision (never negative): the
	// largest cost that would be allowed now.
	Remaining int64
	// Limit is the policy's quota.
	Limit int64
	// RetryAfter is how long until a request of this cost would be allowed: 0 when
	// allowed, Never when it never can be.
	RetryAfter time.Duration
	// ResetAfter is how long until Remaining next rises by itself; 0 if it cannot.
	ResetAfter time.Duration
	// Delay is how long to hold the request before forwarding it (leaky_bucket with
	// MaxDelay only; 0 otherwise).
	Delay time.Duration
	// Policy is the policy that decided.
	Policy *Policy
}

// Store decides batches of requests against shared state. Local keeps the state in
// memory; a Redis-backed Store shares it across edges with the same semantics.
//
// Implementations are safe for concurrent use and record every decision with Record.
type Store interface {
	// Decide decides reqs together at instant now and appends one Decision per request
	// to out, in order. It reports whether every request was allowed. If any is denied
	// nothing is charged: all-or-nothing. Concurrency requests acquire units that must
	// be given back with Release (see Acquire, which does it through a Lease).
	//
	// On error nothing is charged, allowed is false, and out may hold provisional
	// decisions; the caller applies its store-failure policy.
	//
	// To decide shadow policies beside enforced ones, call Decide twice with the same
	// out: first the enforced requests, then the shadow requests appended behind them.
	// The shadow batch is charged on its own, so a shadow denial never blocks anything.
	Decide(ctx context.Context, now time.Time, reqs []Request, out []Decision) ([]Decision, bool, error)
	// Release gives back the units of the concurrency requests in reqs; requests of
	// other algorithms are skipped, so the batch passed to Decide can be passed as is.
	// Counts never go below zero.
	Release(ctx context.Context, reqs []Request) error
}

var (
	// ErrInvalidRequest reports a request without a policy made by NewPolicy, or with a
	// negative cost.
	ErrInvalidRequest = errors.New("limiter: invalid request")
	// ErrFull reports that a new key could not be stored because every entry of its
	// part of the table holds concurrency units, which are never evicted.
	ErrFull = errors.New("limiter: table full of held concurrency units")
)

// Take decides a single request: Decide with a batch of one. Use it to charge a body
// of unknown length as it streams (unit content-bytes): charge each chunk as it arrives;
// when a chunk is denied, Remaining tells how many of its bytes would still fit.
func Take(ctx context.Context, st Store, now time.Time, req Request) (Decision, error) {
	var buf [1]Decision
	out, _, err := st.Decide(ctx, now, []Request{req}, buf[:0])
	if len(out) == 0 {
		return Decision{Policy: req.Policy}, err
	}
	return out[0], err
}
