package bench

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/h3edge/h3edge/headers"
)

// FieldProblem names a way the RateLimit fields of a response disagree with themselves
// or with what the client observed (draft-ietf-httpapi-ratelimit-headers-11, h3edge's
// DESIGN §5).
type FieldProblem string

// The problems the checker counts. A response counts once in FieldStats.Inconsistent
// however many problems it has, and once under each problem it has.
const (
	// ProblemMalformed: a field is present but is not a valid Structured Field List, or
	// holds no well-formed item.
	ProblemMalformed FieldProblem = "malformed"
	// ProblemOneField: only one of RateLimit-Policy and RateLimit is present.
	ProblemOneField FieldProblem = "one-field-missing"
	// ProblemUnknownPolicy: a RateLimit item names no item of RateLimit-Policy.
	ProblemUnknownPolicy FieldProblem = "unknown-policy"
	// ProblemAboveQuota: r is larger than the policy's q.
	ProblemAboveQuota FieldProblem = "r-above-q"
	// ProblemRoseEarly: r rose between two responses for the same policy and partition
	// key although less time passed than the earlier response's t allowed (t is rounded
	// up, so the rise may come up to one second before t, never earlier).
	ProblemRoseEarly FieldProblem = "r-rose-early"
	// ProblemNoRetryAfter: a 429 with the fields but without a usable Retry-After.
	ProblemNoRetryAfter FieldProblem = "429-no-retry-after"
	// ProblemRetryBeforeT: a 429's Retry-After is shorter than the t of an exhausted
	// (r=0) item.
	ProblemRetryBeforeT FieldProblem = "retry-after-before-t"
	// Problem429NotExhausted: a 429 on which no request-counting item has r=0.
	Problem429NotExhausted FieldProblem = "429-without-r0"
)

// FieldProblems lists every problem, in report order.
var FieldProblems = []FieldProblem{
	ProblemMalformed, ProblemOneField, ProblemUnknownPolicy, ProblemAboveQuota,
	ProblemRoseEarly, ProblemNoRetryAfter, ProblemRetryBeforeT, Problem429NotExhausted,
}

// FieldStats counts what the measured responses said in their RateLimit fields.
type FieldStats struct {
	// Present counts responses carrying both RateLimit-Policy and RateLimit.
	Present int64
	// Parsed counts those of Present whose two fields are valid Lists with at least one
	// well-formed item each.
	Parsed int64
	// Inconsistent counts responses with at least one FieldProblem.
	Inconsistent int64
	// Problems counts responses by problem; every problem is present.
	Problems map[FieldProblem]int64
}

// maxTrackedPartitions bounds the checker's memory: past this many (policy, partition)
// pairs, new ones are not followed over time (their other checks still run).
const maxTrackedPartitions = 1 << 18

// fieldChecker checks the RateLimit fields of every response. Safe for concurrent use.
type fieldChecker struct {
	present, parsed, inconsistent atomic.Int64
	problems                      [8]atomic.Int64 // indexed like FieldProblems

	// last holds, per policy name and partition key, the latest response received.
	mu   sync.Mutex
	last map[string]fieldObs
}

// fieldObs is one policy item as a response carried it, with the request's send time
// and the response's arrival time: the decision happened between the two.
type fieldObs struct {
	r, t       int64
	hasT       bool
	sent, recv time.Time
}

func newFieldChecker() *fieldChecker {
	return &fieldChecker{last: make(map[string]fieldObs)}
}

// observe checks resp, sent at sent and whose header arrived at recv. client names the
// client key the request was sent under (source and API key); it stands in for the
// partition key when the server sends no pk. Only measured responses are counted, but
// every response updates what later ones are compared with.
func (c *fieldChecker) observe(resp *http.Response, client string, sent, recv time.Time, measured bool) {
	polV, limV := resp.Header.Values(headers.PolicyFieldName), resp.Header.Values(headers.LimitFieldName)
	if len(polV) == 0 && len(limV) == 0 {
		return // a route without policies, or a refusal that builds no fields
	}
	var bad uint16
	flag := func(p FieldProblem) {
		for i, q := range FieldProblems {
			if q == p {
				bad |= 1 << i
			}
		}
	}
	defer func() {
		if !measured {
			return
		}
		if len(polV) > 0 && len(limV) > 0 {
			c.present.Add(1)
		}
		if bad != 0 {
			c.inconsistent.Add(1)
			for i := range FieldProblems {
				if bad&(1<<i) != 0 {
					c.problems[i].Add(1)
				}
			}
		}
	}()
	if len(polV) == 0 || len(limV) == 0 {
		flag(ProblemOneField)
		return
	}
	pols, err1 := parsePolicies(polV)
	lims, err2 := parseLimits(limV)
	if err1 != nil || err2 != nil || len(pols) == 0 || len(lims) == 0 {
		flag(ProblemMalformed)
		return
	}
	if measured {
		c.parsed.Add(1)
	}

	var retry time.Duration
	hasRetry := false
	if resp.StatusCode == http.StatusTooManyRequests {
		retry, hasRetry = retryAfter(resp.Header, recv)
		if !hasRetry {
			flag(ProblemNoRetryAfter)
		}
	}
	exhausted, counting := false, false
	for _, l := range lims {
		p, ok := findPolicy(pols, l.name)
		if !ok {
			flag(ProblemUnknownPolicy)
		} else {
			if l.remaining > p.quota {
				flag(ProblemAboveQuota)
			}
			if p.unit == headers.UnitRequests {
				counting = true
				exhausted = exhausted || l.remaining == 0
			}
		}
		if resp.StatusCode == http.StatusTooManyRequests && hasRetry && l.remaining == 0 && l.hasReset &&
			retry < time.Duration(l.reset)*time.Second {
			flag(ProblemRetryBeforeT)
		}
		if c.roseEarly(partition(l, client), fieldObs{r: l.remaining, t: l.reset, hasT: l.hasReset, sent: sent, recv: recv}) {
			flag(ProblemRoseEarly)
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests && counting && !exhausted {
		flag(Problem429NotExhausted)
	}
}

// roseEarly compares o with the latest earlier response for the same partition and
// records o. Two responses are compared only when they are ordered for sure: the new
// request left after the old response arrived. Then the old decision came before
// old.recv ≤ new.sent, and the new one before new.recv; if r rose, the rise happened
// within new.recv − old.sent, which must exceed old.t − 1 s (t is rounded up).
func (c *fieldChecker) roseEarly(key string, o fieldObs) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.last[key]
	early := ok && !o.sent.Before(prev.recv) && prev.hasT && o.r > prev.r &&
		o.recv.Sub(prev.sent) <= time.Duration(prev.t-1)*time.Second
	if ok || len(c.last) < maxTrackedPartitions {
		if !ok || o.recv.After(prev.recv) {
			c.last[key] = o
		}
	}
	return early
}

func (c *fieldChecker) stats() FieldStats {
	s := FieldStats{
		Present:      c.present.Load(),
		Parsed:       c.parsed.Load(),
		Inconsistent: c.inconsistent.Load(),
		Problems:     make(map[FieldProblem]int64, len(FieldProblems)),
	}
	for i, p := range FieldProblems {
		s.Problems[p] = c.problems[i].Load()
	}
	return s
}

// policyItem is what the checks read of a well-formed RateLimit-Policy item.
type policyItem struct {
	name  string
	quota int64        // q
	unit  headers.Unit // qu; UnitRequests when absent
}

// limitItem is what the checks read of a well-formed RateLimit item.
type limitItem struct {
	name      string
	remaining int64 // r
	reset     int64 // t in seconds, valid if hasReset
	hasReset  bool
	pk        []byte // nil if absent
}

// parsePolicies parses the RateLimit-Policy field lines in values (as from
// http.Header.Values) as one RFC 9651 List with httpsfv; a field that is not one is an
// error. It keeps the well-formed items in order and skips the others, as the draft tells
// clients to: a value that is not a String (or is an Inner List), a missing q or one that
// is not a non-negative Integer, a w that is not a positive Integer, a qu that is not a
// String, or a pk that is not a Byte Sequence. Other parameters are ignored.
func parsePolicies(values []string) ([]policyItem, error) {
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		return nil, err
	}
	var out []policyItem
	for _, m := range list {
		it, _ := m.(httpsfv.Item)
		name, ok := it.Value.(string)
		if !ok {
			continue
		}
		p := policyItem{name: name, unit: headers.UnitRequests}
		q, _ := it.Params.Get("q")
		if p.quota, ok = q.(int64); !ok || p.quota < 0 {
			continue
		}
		if w, ok := it.Params.Get("w"); ok {
			if w, ok := w.(int64); !ok || w <= 0 {
				continue
			}
		}
		if qu, ok := it.Params.Get("qu"); ok {
			s, ok := qu.(string)
			if !ok {
				continue
			}
			p.unit = headers.Unit(s)
		}
		if pk, ok := it.Params.Get("pk"); ok {
			if _, ok := pk.([]byte); !ok {
				continue
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// parseLimits parses the RateLimit field lines in values like parsePolicies, skipping
// items whose value is not a String, whose r is missing or not a non-negative Integer,
// whose t is not a non-negative Integer, or whose pk is not a Byte Sequence.
func parseLimits(values []string) ([]limitItem, error) {
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		return nil, err
	}
	var out []limitItem
	for _, m := range list {
		it, _ := m.(httpsfv.Item)
		name, ok := it.Value.(string)
		if !ok {
			continue
		}
		l := limitItem{name: name}
		r, _ := it.Params.Get("r")
		if l.remaining, ok = r.(int64); !ok || l.remaining < 0 {
			continue
		}
		if t, ok := it.Params.Get("t"); ok {
			if l.reset, ok = t.(int64); !ok || l.reset < 0 {
				continue
			}
			l.hasReset = true
		}
		if pk, ok := it.Params.Get("pk"); ok {
			if l.pk, ok = pk.([]byte); !ok {
				continue
			}
		}
		out = append(out, l)
	}
	return out, nil
}

func findPolicy(ps []policyItem, name string) (policyItem, bool) {
	for _, p := range ps {
		if p.name == name {
			return p, true
		}
	}
	return policyItem{}, false
}

// partition names the state a RateLimit item describes: the policy and the server's
// partition key, or the client's own key when the server sends none.
func partition(l limitItem, client string) string {
	if l.pk != nil {
		return l.name + "\x00p" + string(l.pk)
	}
	return l.name + "\x00c" + client
}

// retryAfter reads Retry-After as delay-seconds or an HTTP-date (relative to now).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get(headers.RetryAfterFieldName))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > 1<<31 {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// limitWait reads what a response asks of its client: how long to wait before the next
// request (the longest t of an exhausted item, and Retry-After on a 429), and the units
// still available (the smallest r; -1 when the response carries no RateLimit field).
func limitWait(resp *http.Response, now time.Time) (wait time.Duration, remaining int64) {
	remaining = -1
	if lims, err := parseLimits(resp.Header.Values(headers.LimitFieldName)); err == nil {
		for _, l := range lims {
			if remaining < 0 || l.remaining < remaining {
				remaining = l.remaining
			}
			if l.remaining == 0 && l.hasReset {
				wait = max(wait, time.Duration(l.reset)*time.Second)
			}
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		remaining = 0
		if d, ok := retryAfter(resp.Header, now); ok {
			wait = max(wait, d)
		}
	}
	return wait, remaining
}

// RespectStats counts what -respect-limits clients held back.
type RespectStats struct {
	// Waits counts requests that waited for the fields before leaving.
	Waits int64
	// Waited is the total time those requests waited.
	Waited time.Duration
}

// respecter paces requests by what earlier responses said, per client key (source
// address and API key): after r=0 it sends nothing for t, after a 429 nothing for
// Retry-After; once it knows r it keeps at most r requests in flight, and when r is
// used up (or after a pause) it sends one request to learn the new r before the rest.
// Safe for concurrent use.
type respecter struct {
	waits  atomic.Int64
	waited atomic.Int64 // ns

	mu   sync.Mutex
	keys map[string]*pace
}

// pace is one client key's state.
type pace struct {
	until    time.Time     // nothing leaves before this
	budget   int64         // requests that may leave before the next answer; -1 unknown
	inflight int64         // requests sent and not yet answered
	changed  chan struct{} // closed and replaced whenever an answer arrives
}

func newRespecter() *respecter {
	return &respecter{keys: make(map[string]*pace)}
}

// acquire waits until key may send a request and takes it in flight. It returns false
// if ctx ends or the wait would pass deadline (zero: none) first.
func (p *respecter) acquire(ctx contextDone, key string, deadline time.Time) bool {
	var start time.Time
	defer func() {
		if !start.IsZero() {
			p.waits.Add(1)
			p.waited.Add(int64(time.Since(start)))
		}
	}()
	for {
		p.mu.Lock()
		s := p.keys[key]
		if s == nil {
			s = &pace{budget: -1, changed: make(chan struct{})}
			p.keys[key] = s
		}
		now := time.Now()
		var wake <-chan struct{}
		var d time.Duration
		switch {
		case now.Before(s.until):
			d = s.until.Sub(now)
		case s.budget != 0 || s.inflight == 0:
			// Free to go: nothing known (-1), units left, or, with none left and
			// nothing in flight, one request to learn the new r.
			if s.budget > 0 {
				s.budget--
			}
			s.inflight++
			p.mu.Unlock()
			return true
		default: // budget used up: wait for an answer
			wake = s.changed
		}
		p.mu.Unlock()
		if start.IsZero() {
			start = now
		}
		if !deadline.IsZero() {
			if !now.Before(deadline) {
				return false
			}
			if d == 0 || now.Add(d).After(deadline) {
				d = deadline.Sub(now)
			}
		}
		if !waitFor(ctx, wake, d) {
			return false
		}
	}
}

// release ends a request of key: resp is its response (nil if it failed), received at now.
func (p *respecter) release(key string, resp *http.Response, now time.Time) {
	wait, remaining := time.Duration(0), int64(-1)
	if resp != nil {
		wait, remaining = limitWait(resp, now)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.keys[key]
	s.inflight--
	if resp != nil {
		if remaining >= 0 {
			// The others in flight may each take a unit this answer did not count yet.
			s.budget = max(remaining-s.inflight, 0)
		} else {
			s.budget = -1
		}
		if wait > 0 && now.Add(wait).After(s.until) {
			s.until = now.Add(wait)
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (p *respecter) stats() *RespectStats {
	return &RespectStats{Waits: p.waits.Load(), Waited: time.Duration(p.waited.Load())}
}

// contextDone is the part of a context the waits use.
type contextDone interface{ Done() <-chan struct{} }

// waitFor waits for wake to close or d to pass (d zero: no timer); false if ctx ends.
func waitFor(ctx contextDone, wake <-chan struct{}, d time.Duration) bool {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-wake:
	case <-timer:
	case <-ctx.Done():
		return false
	}
	return true
}
