package enforce

import (
	"net/http"
	"strings"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/headers"
	"github.com/h3edge/h3edge/limiter"
)

// writeFields sets RateLimit-Policy (the enforced rules in mask) and RateLimit (one
// item per decision made) on h, and the legacy fields when configured. It returns the
// longest delay a decision asks for.
func writeFields(h http.Header, r *http.Request, rs *rules.Set, mask uint64, d *scratch) (delay time.Duration) {
	polName, limName := headers.PolicyFieldName, headers.LimitFieldName
	if r.ProtoMajor >= 2 {
		polName, limName = headers.PolicyFieldNameLower, headers.LimitFieldNameLower
	}
	h[polName] = rs.PolicyField(mask)
	f := &d.fields
	for i, ru := range d.rules {
		if d.skip&(1<<i) != 0 {
			continue
		}
		dec := &d.out[i]
		f.rule = append(f.rule, i)
		// Filled in place: appending a whole Limit would copy its pointers under the
		// GC's bulk write barrier.
		f.limits = append(f.limits, headers.Limit{})
		l := &f.limits[len(f.limits)-1]
		l.Name = ru.Name
		l.Remaining, l.Reset = dec.Remaining, dec.ResetAfter
		l.Concurrency = ru.Unit == rules.ConcurrentRequests
		l.PartitionKey = d.reqs[i].Key[:8] // d.reqs outlives the field: no copy
		delay = max(delay, dec.Delay)
	}
	f.buf = headers.AppendLimitField(f.buf[:0], f.limits)
	h[limName] = []string{string(f.buf)}
	if rs.Legacy && len(f.limits) > 0 {
		i := headers.Closest(f.limits)
		headers.SetLegacy(h, d.rules[f.rule[i]].Field.Quota, f.limits[i])
	}
	return delay
}

// deny answers 429 naming the policies that denied b, with a Retry-After no earlier
// than any of them allows, and tells Config.Refused.
func (e *Enforcer) deny(w http.ResponseWriter, r *http.Request, now time.Time, b *batch) {
	violated, denying, retry := refusal(b)
	retry = headers.RetryAfter(denying, retry)
	answer.QuotaExceeded(w, r, denying, retry, "quota exceeded for policy "+strings.Join(violated, ", "), violated)
	if e.cfg.Refused != nil {
		e.cfg.Refused(r, now, violated, b.reqs[0].Key, retry)
	}
}

// refusal lists the policies that denied b, their limits and the longest retry they
// estimate.
func refusal(b *batch) (violated []string, denying []headers.Limit, retry time.Duration) {
	for i, ru := range b.rules {
		if i >= len(b.out) || b.out[i].Allowed {
			continue
		}
		dec := &b.out[i]
		violated = append(violated, ru.Name)
		denying = append(denying, headers.Limit{Name: ru.Name, Remaining: dec.Remaining, Reset: dec.ResetAfter,
			Concurrency: ru.Unit == rules.ConcurrentRequests})
		ra := dec.RetryAfter
		if ra == limiter.Never {
			// The request can never fit (e.g. a body larger than the quota): a window
			// from now is as good an answer as any, and the detail says why.
			ra = max(ru.Limiter.Window, time.Second)
		}
		retry = max(retry, ra)
	}
	return violated, denying, retry
}

// answerUndecided answers 503 for a request the store could not decide for.
func answerUndecided(w http.ResponseWriter, r *http.Request) {
	answer.Problem(w, r, http.StatusServiceUnavailable, "Service Unavailable", "the rate limiter could not decide")
}

// answerClosed answers 503 for policies whose store could not decide and whose
// on_store_failure is closed.
func answerClosed(w http.ResponseWriter, r *http.Request, policies []string) {
	answer.ReducedCapacity(w, r, "the quota store is unavailable", policies)
}
