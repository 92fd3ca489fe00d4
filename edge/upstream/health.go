package upstream

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// runChecks probes t every Health.Interval, ±10 % at random so that a fleet of edges
// (and the targets of one pool) do not probe in step, the first probe at a random
// point of the first interval. It ends when the pool closes.
func (p *Pool) runChecks(t *target) {
	defer p.wg.Done()
	h := p.cfg.Health
	timer := time.NewTimer(time.Duration(rand.Int64N(int64(h.Interval))))
	defer timer.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-timer.C:
		}
		p.check(t)
		jitter := 0.9 + 0.2*rand.Float64()
		timer.Reset(time.Duration(float64(h.Interval) * jitter))
	}
}

// check runs one probe of t and applies its outcome.
func (p *Pool) check(t *target) {
	h := p.cfg.Health
	ctx, cancel := context.WithTimeout(p.ctx, h.Timeout) // Close ends a probe too
	defer cancel()
	u := t.dial
	u.Path = h.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	ok := false
	if err == nil {
		req.Header.Set("User-Agent", "h3edge-health-check")
		var resp *http.Response
		if resp, err = t.probe.RoundTrip(req); err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			ok = resp.StatusCode < 400
		}
	}
	p.checked(t, ok, time.Now().UnixNano())
}

// checked applies the outcome of one check of t at now: Unhealthy failures in a row
// take it out, Healthy successes in a row bring it back; a success also ends an
// ejection's probation once the ejection is over.
func (p *Pool) checked(t *target, ok bool, now int64) {
	h := p.cfg.Health
	t.mu.Lock()
	if ok {
		t.checkRun = max(t.checkRun, 0) + 1
	} else {
		t.checkRun = min(t.checkRun, 0) - 1
	}
	run := t.checkRun
	t.mu.Unlock()
	switch {
	case ok && run >= h.Healthy && t.activeDown.Load():
		t.activeDown.Store(false)
		p.log.Info("target healthy again", "target", t.key, "checks", run)
	case !ok && -run >= h.Unhealthy && !t.activeDown.Load():
		t.activeDown.Store(true)
		p.log.Warn("target failed its health checks; out of rotation", "target", t.key, "checks", -run)
	}
	if ok && !t.activeDown.Load() && t.succeed(now) {
		p.log.Info("target back after ejection", "target", t.key)
	}
}
