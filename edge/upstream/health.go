package upstream

import (
	"bytes"
	"context"
	"encoding/binary"
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
	if h.GRPC {
		p.checked(t, grpcHealth(ctx, t, h.Service), time.Now().UnixNano())
		return
	}
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

// grpcHealth asks t about service with gRPC's health protocol
// (grpc.health.v1.Health/Check, https://github.com/grpc/grpc/blob/master/doc/health-checking.md)
// and reports whether it answered SERVING with grpc-status 0. The two messages are
// small enough to write and read by hand (FuzzServing): a HealthCheckRequest is field 1 (service,
// a string), a HealthCheckResponse field 1 (status, an enum; SERVING is 1).
func grpcHealth(ctx context.Context, t *target, service string) bool {
	msg := []byte{}
	if service != "" {
		msg = binary.AppendUvarint(append(msg, 0x0a), uint64(len(service)))
		msg = append(msg, service...)
	}
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	frame = append(frame, msg...)
	u := t.dial
	u.Path = "/grpc.health.v1.Health/Check"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(frame))
	if err != nil {
		return false
	}
	req.Header["Content-Type"] = []string{"application/grpc"}
	req.Header["Te"] = []string{"trailers"}
	req.Header["User-Agent"] = []string{"h3edge-health-check"}
	resp, err := t.probe.RoundTrip(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return err == nil && resp.StatusCode == http.StatusOK && resp.Trailer.Get("Grpc-Status") == "0" && serving(body)
}

// serving reports whether body, a gRPC response body, is one uncompressed
// HealthCheckResponse message whose status is SERVING.
func serving(body []byte) bool {
	if len(body) < 5 || body[0] != 0 {
		return false
	}
	m := body[5:]
	if n := binary.BigEndian.Uint32(body[1:5]); uint64(n) != uint64(len(m)) {
		return false
	}
	// Field 1, varint: the status. Other fields (none today) are skipped unread: a
	// newer server's additions do not fail the check.
	for len(m) > 0 {
		tag, k := binary.Uvarint(m)
		if k <= 0 {
			return false
		}
		m = m[k:]
		switch tag & 7 {
		case 0:
			v, k := binary.Uvarint(m)
			if k <= 0 {
				return false
			}
			if tag>>3 == 1 {
				return v == 1 // SERVING
			}
			m = m[k:]
		case 2:
			l, k := binary.Uvarint(m)
			if k <= 0 || uint64(len(m)-k) < l {
				return false
			}
			m = m[k+int(l):]
		default:
			return false
		}
	}
	return false // no status: UNKNOWN
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
