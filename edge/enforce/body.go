package enforce

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/rules"
)

// bodyChargeKey is the context key under which a request's bodyCharge travels, so the
// origin can tell a quota cut-off from a broken upload (BodyCutOff).
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
// it is set the refusal (b.out, o) no longer changes.
type bodyCharge struct {
	io.ReadCloser
	e   *Enforcer
	ctx context.Context
	// b holds the content-bytes rules and their requests. It is the charge's own, not
	// the request's pooled one: a proxy may read the body after the handler returned.
	b      batch
	o      outcome // the refusal, once denied
	denied atomic.Bool
}

// errBodyQuota ends a body read that crossed a content-bytes quota.
var errBodyQuota = errors.New("enforce: request body exceeds the content-bytes quota")

// bodyCharge returns the charging wrapper for r's body, or nil when nothing is charged
// as it streams (no content-bytes policy, or a known Content-Length charged up front).
func (e *Enforcer) bodyCharge(r *http.Request, d *batch) *bodyCharge {
	if r.ContentLength >= 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	var c *bodyCharge
	for i, ru := range d.rules {
		if ru.Unit != rules.ContentBytes {
			continue
		}
		if c == nil {
			c = &bodyCharge{ReadCloser: r.Body, e: e, ctx: context.WithoutCancel(r.Context())}
		}
		c.b.reqs = append(c.b.reqs, d.reqs[i])
		c.b.rules = append(c.b.rules, ru)
		c.b.anyGlobal = c.b.anyGlobal || ru.Global
	}
	return c
}

func (c *bodyCharge) Read(p []byte) (int, error) {
	if c.denied.Load() {
		return 0, errBodyQuota
	}
	n, err := c.ReadCloser.Read(p)
	if n > 0 {
		b := &c.b
		for i := range b.reqs {
			b.reqs[i].Cost = int64(n)
		}
		b.skip = 0
		if o := c.e.decideEnforced(c.ctx, time.Now(), b); o.verdict != allowed {
			c.o = o
			c.denied.Store(true)
			return 0, errBodyQuota
		}
	}
	return n, err
}

// BodyCutOff reports whether r's streamed body was cut off by a content-bytes quota:
// a failed read of it is then the quota's doing, and AnswerBodyCutOff the answer.
func BodyCutOff(r *http.Request) bool {
	c, ok := r.Context().Value(bodyChargeKey{}).(*bodyCharge)
	return ok && c.denied.Load()
}

// AnswerBodyCutOff answers a request whose streamed body was cut off (BodyCutOff):
// 429 naming the policies that refused it, or 503 when the store could not decide.
func AnswerBodyCutOff(w http.ResponseWriter, r *http.Request) {
	c := r.Context().Value(bodyChargeKey{}).(*bodyCharge)
	switch c.o.verdict {
	case closed:
		answerClosed(w, r, c.o.closed)
	case failed:
		answerUndecided(w, r)
	default:
		violated, denying, retry := refusal(&c.b)
		answer.QuotaExceeded(w, r, denying, retry, "the request body crossed the content-bytes quota", violated)
	}
}
