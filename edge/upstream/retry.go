package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// MaxReplayBody is the largest request body a retry sends again: a body is kept as it
// is read, up to this many bytes; a longer one, or one still being read when a try
// fails, is not retried.
const MaxReplayBody = 64 << 10

// RetryBudget is the share of a pool's requests in the last 10 s that may be retries;
// minRetries more are always allowed per 10 s, so a quiet pool can still retry.
const (
	RetryBudget = 0.2
	minRetries  = 3
)

// roundTrip tries targets until one answers or retrying is not allowed. info, if not
// nil, is told of 1xx responses; first, if not nil, is the first try's request copy.
func (p *Pool) roundTrip(req *http.Request, info informer, first *tryRequest) (*http.Response, error) {
	now := time.Now()
	p.budget.request(now)
	key := ""
	if p.cfg.Balance == Hash {
		key = clientKeyOf(req.Context())
	}
	var body *replayBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &replayBody{src: req.Body, size: req.ContentLength}
	}
	idempotent := isIdempotent(req)
	var tried uint64
	for attempt := 0; ; attempt++ {
		t := p.pick(key, tried, now.UnixNano())
		if t == nil { // only on the first try: a retry is made only when there is a target
			return nil, &NoHealthyError{RetryAfter: p.retryAfter(now)}
		}
		if t.index < 64 {
			tried |= 1 << t.index
		}
		resp, err, reached := p.try(req, t, body, info, first)
		first = nil // a later try's copy is its own: the transport may still hold this one
		if req.Context().Err() != nil || err != nil && body.failed() {
			// The client went away, or its body failed (body_read_timeout): nothing
			// to retry, and not the target's fault.
			return resp, err
		}
		retry := attempt < p.cfg.Retries && body.replayable()
		switch {
		case err != nil:
			retry = retry && (!reached || idempotent)
		case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable:
			retry = retry && idempotent
		default:
			retry = false
		}
		if retry {
			now = time.Now() // the try may have taken up to the timeout
			retry = p.pick(key, tried, now.UnixNano()) != nil && p.budget.retry(now)
		}
		if retry {
			p.stats.retries.Add(1)
			if resp != nil {
				drainFailed(resp.Body)
			}
			continue
		}
		return resp, err
	}
}

// drainFailed ends the body of a try answered 502 or 503 before the retry. An
// HTTP/1.1 target's connection is kept when the rest of the body (at most 64 KiB) comes
// within drainWait; any other body is closed at once (HTTP/2 resets the stream, net/http's
// HTTP/1.1 transport drops the connection), so that a target that stalls its error's
// body holds up the retry for drainWait at most, not read_timeout.
func drainFailed(body io.ReadCloser) {
	if tb, ok := body.(*tryBody); ok {
		if hb, ok := tb.ReadCloser.(*h1Body); ok {
			hb.drainWithin(64<<10, drainWait)
		}
	}
	body.Close()
}

// drainWait bounds drainFailed's wait: an error page comes with its header, or soon.
const drainWait = 100 * time.Millisecond

// try sends req to t once, and records the outcome for t's health and the metrics.
// reached is false when the request certainly did not reach t (the connection could
// not be made). tr, if not nil, is where the try's copy of req goes.
func (p *Pool) try(req *http.Request, t *target, body *replayBody, info informer, tr *tryRequest) (resp *http.Response, err error, reached bool) {
	if p.cfg.OnTry != nil {
		p.cfg.OnTry(req, t.key)
	}
	// The timeout: a transport that bounds the wait itself is given the deadline;
	// others get a context the timeout cancels (a context, a timer and a request copy
	// per try: 3–4 % of a proxied request's CPU in the proxy scenario's profile).
	var (
		out    *http.Request
		cancel = func(error) {}
		timer  *time.Timer
	)
	start := time.Now()
	// A gRPC client's deadline, when longer, stands for the pool's timeouts; its
	// passing is not the target's failure.
	grpcD := grpcDeadline(req)
	timeout, clientDeadline := max(p.cfg.Timeout, grpcD), grpcD > p.cfg.Timeout
	dt, direct := t.rt.(deadlineTransport)
	// The try's request, URL and body reader share one allocation (the exchange's, for
	// a first try).
	if tr == nil {
		tr = new(tryRequest)
	}
	tr.req, tr.url = *req, *req.URL // shallow: the header is not changed per try
	out = &tr.req
	if !direct {
		ctx := req.Context()
		if info != nil { // net/http's transports report 1xx through the context only
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: info.got1xx})
		}
		ctx, cancel = context.WithCancelCause(ctx)
		timer = time.AfterFunc(timeout, func() { cancel(ErrTimeout) })
		out = out.WithContext(ctx)
	}
	u := &tr.url
	u.Scheme, u.Host = t.dial.Scheme, t.dial.Host
	if t.dial.Path != "" && t.dial.Path != "/" {
		u.Path, u.RawPath = joinPath(t.dial.Path, req.URL.Path), ""
	}
	out.URL = u
	out.GetBody = nil
	var (
		ab     *attemptBody
		upload *progressBody
	)
	if body != nil {
		ab = &tr.body
		*ab = attemptBody{rb: body}
		out.Body = ab
		if !direct {
			upload = &progressBody{ReadCloser: ab, timer: timer, d: timeout}
			out.Body = upload
		}
	}

	t.inflight.Add(1)
	p.inflight.Add(1)
	if direct {
		resp, err = dt.roundTripBy(out, start.Add(timeout), info)
	} else {
		resp, err = t.rt.RoundTrip(out)
		stopTimer(timer, upload)
	}
	end := time.Now()
	elapsed, now := end.Sub(start), end.UnixNano()
	if err != nil {
		if ab != nil {
			ab.detach() // whatever the transport still reads belongs to no try
		}
		t.inflight.Add(-1)
		p.requestDone()
		cancel(nil)
		if !direct && context.Cause(out.Context()) == ErrTimeout || clientDeadline && !end.Before(start.Add(timeout)) {
			// A try that ends past a gRPC client's deadline ended by it, whatever
			// the error: the target got the same deadline and may reset the stream.
			err = ErrTimeout
		}
		reached = !isDialError(err)
		if body.failed() {
			// The client's body failed, not the target: a slow client must not
			// eject the targets of the clients that are not.
			return nil, err, reached
		}
		t.stats.errors.Add(1)
		if clientDeadline && err == ErrTimeout {
			return nil, err, reached // the client's deadline passed, not the pool's timeout
		}
		if req.Context().Err() == nil && !queuedOnly(err) && p.failed(t, now) {
			p.log.Warn("target ejected", "target", t.key, "reason", err.Error(), "for", p.cfg.Passive.Eject)
		}
		return nil, err, reached
	}
	t.observe(elapsed)
	p.stats.duration.observe(elapsed)
	t.stats.count(resp.StatusCode)
	if gatewayFailure(resp.StatusCode) {
		if p.failed(t, now) {
			p.log.Warn("target ejected", "target", t.key, "reason", resp.Status, "for", p.cfg.Passive.Eject)
		}
	} else if t.succeed(now) {
		p.log.Info("target back after ejection", "target", t.key)
	}
	if body != nil && resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusServiceUnavailable {
		body.settle() // this try's answer stands: the rest of the body streams unkept
	}
	tb := &tr.resp
	*tb = tryBody{p: p, t: t, cancel: cancel}
	if _, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = wrapBody(resp.Body, tb.end) // a 101's: the proxy writes to it too
	} else {
		tb.ReadCloser, resp.Body = resp.Body, tb
		if !direct && resp.Body != http.NoBody {
			tb.ReadCloser = newIdleBody(tb.ReadCloser, max(p.cfg.ReadTimeout, grpcD), out.Context(), cancel, upload)
		}
	}
	return resp, nil, true
}

// idleBody is a response body of net/http's Transport whose reads must each bring
// bytes within d: a read that waits longer ends the try's context, which ends the
// read, with ErrIdle. Only the waits for the body count, not the time the proxy spends
// writing what it read to the client between them; and a request body still coming
// (upload, if not nil) is activity too: an origin that answers as it reads a long
// upload, or a gRPC server that listens to a client stream, is not idle.
type idleBody struct {
	io.ReadCloser
	ctx    context.Context
	cancel func(error)
	upload *progressBody
	timer  *time.Timer
	d      time.Duration
	// began is the UnixNano at which the Read that waits began, 0 while none does: a
	// fire checks the wait against it, so one that comes as a Read returns, or one
	// re-armed late, ends no other Read early.
	began atomic.Int64
}

func newIdleBody(rc io.ReadCloser, d time.Duration, ctx context.Context, cancel func(error), upload *progressBody) *idleBody {
	b := &idleBody{ReadCloser: rc, ctx: ctx, cancel: cancel, upload: upload, d: d}
	b.timer = time.AfterFunc(d, b.fire)
	b.timer.Stop() // armed by each Read
	return b
}

// fire is the timer's: the waiting read has waited d, and the upload has not moved
// for as long; else the timer is set for what is left of d.
func (b *idleBody) fire() {
	from := b.began.Load()
	if from == 0 {
		return
	}
	if b.upload != nil {
		from = max(from, b.upload.last.Load())
	}
	if left := b.d - time.Since(time.Unix(0, from)); left > 0 {
		b.timer.Reset(left)
		return
	}
	b.cancel(ErrIdle)
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.began.Store(time.Now().UnixNano())
	b.timer.Reset(b.d)
	n, err := b.ReadCloser.Read(p)
	b.began.Store(0)
	b.timer.Stop()
	if err != nil && err != io.EOF && context.Cause(b.ctx) == ErrIdle {
		err = ErrIdle
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

// tryRequest is a try's copy of the request with its own URL and body reader, and
// its response body's wrapper.
type tryRequest struct {
	req  http.Request
	url  url.URL
	body attemptBody
	resp tryBody
}

// tryBody is a try's response body: closed, it ends the try (its place in the in-flight
// counts, its timeout's context).
type tryBody struct {
	io.ReadCloser
	p      *Pool
	t      *target
	cancel func(error)
	closed atomic.Bool
}

func (b *tryBody) Close() error {
	err := b.ReadCloser.Close()
	if !b.closed.Swap(true) {
		b.end()
	}
	return err
}

func (b *tryBody) end() {
	b.t.inflight.Add(-1)
	b.cancel(nil)
	b.p.requestDone()
}

// deadlineTransport is a Transport that bounds the wait for a response header
// (connection, request and header) by a deadline itself, as h1Client does with the
// connection's deadlines; it reports a passed deadline as ErrTimeout. It tells info,
// if not nil, of 1xx responses, else the ClientTrace of req's context.
type deadlineTransport interface {
	roundTripBy(req *http.Request, deadline time.Time, info informer) (*http.Response, error)
}

// gatewayFailure tells the answers that count toward a passive ejection, as the
// connection errors and timeouts do: 502, 503 and 504 say the target (or what is
// behind it) cannot serve. A 500 or another 5xx is the application's answer about one
// request — one broken endpoint must not take a healthy target, and with it the pool,
// out of rotation.
func gatewayFailure(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// failed records a failure of t, reporting whether it ejected t.
func (p *Pool) failed(t *target, now int64) bool {
	return t.fail(p.cfg.Passive, now)
}

// retryAfter is how long a client told "no healthy target" should wait: until the
// earliest ejection ends, else a health check interval; 1s to 1m.
func (p *Pool) retryAfter(now time.Time) time.Duration {
	d := time.Duration(0)
	for _, t := range p.targets {
		if until := t.ejectedUntil.Load(); until > now.UnixNano() {
			if left := time.Duration(until - now.UnixNano()); d == 0 || left < d {
				d = left
			}
		}
	}
	if h := p.cfg.Health; h != nil && (d == 0 || h.Interval < d) {
		d = h.Interval * time.Duration(h.Healthy)
	}
	return min(max(d, time.Second), time.Minute)
}

func joinPath(base, path string) string {
	switch {
	case base[len(base)-1] == '/' && len(path) > 0 && path[0] == '/':
		return base + path[1:]
	case base[len(base)-1] != '/' && (len(path) == 0 || path[0] != '/'):
		return base + "/" + path
	}
	return base + path
}

// isIdempotent reports whether req may be sent twice (RFC 9110 §9.2.2). A request
// with a body of its own is idempotent by method only when the body can be sent
// again, which the caller checks.
func isIdempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return req.Header.Get("Upgrade") == ""
	}
	return false
}

// isDialError reports whether err is a failure to connect: the request never left.
func isDialError(err error) bool {
	var op *net.OpError
	var ns *notSentError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &ns)
}

// replayBody keeps what has been read of a request body, up to MaxReplayBody, so
// that a retry can send it again. Each try reads it through its own attemptBody;
// a try that failed is detached and reads nothing more. It never closes the body
// itself: the server does once the request is done.
type replayBody struct {
	src  io.ReadCloser
	size int64 // the declared length, -1 if unknown: once read, the body is whole (eof)
	// mu guards the fields below; src.Read runs outside it, with reading set.
	mu       sync.Mutex
	buf      []byte
	consumed int64 // bytes read from src
	overflow bool  // more than MaxReplayBody was read, or settle was called: buf is dropped
	eof      bool
	err      error
	reading  bool
}

// replayable reports whether a new try can send the body from its start: nothing or
// all of it read, and no read in progress. A nil replayBody (no body) is.
func (b *replayBody) replayable() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.overflow && !b.reading && (b.consumed == 0 || b.eof)
}

// failed reports whether reading the client's body failed (other than at its end).
// A nil replayBody (no body) has not.
func (b *replayBody) failed() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err != nil
}

// settle stops keeping the body: no later try will send it. A try reading it reads on.
func (b *replayBody) settle() {
	b.mu.Lock()
	b.overflow, b.buf = true, nil
	b.mu.Unlock()
}

// attemptBody is one try's reader of a replayBody.
type attemptBody struct {
	rb       *replayBody
	pos      int64 // bytes this try has read
	detached bool  // guarded by rb.mu
}

var errDetached = errors.New("upstream: request body belongs to a later try")

func (a *attemptBody) Read(p []byte) (int, error) {
	b := a.rb
	b.mu.Lock()
	if a.detached {
		b.mu.Unlock()
		return 0, errDetached
	}
	if a.pos < b.consumed { // behind the frontier: from what was kept
		if b.overflow {
			b.mu.Unlock()
			return 0, errDetached // not kept: replayable said no such try is made
		}
		n := copy(p, b.buf[a.pos:])
		a.pos += int64(n)
		b.mu.Unlock()
		return n, nil
	}
	if b.eof || b.err != nil {
		err := b.err
		b.mu.Unlock()
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	b.reading = true
	b.mu.Unlock()

	n, err := b.src.Read(p)

	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	b.consumed += int64(n)
	a.pos += int64(n)
	if !b.overflow {
		if len(b.buf)+n <= MaxReplayBody {
			b.buf = append(b.buf, p[:n]...)
		} else {
			b.overflow, b.buf = true, nil
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
	case err != nil:
		b.err = err
	case b.size > 0 && b.consumed >= b.size:
		// All it declared: a try that reads no further (h1Client stops at the
		// length) has sent the whole body. net/http's HTTP/2 server gives the last
		// bytes without io.EOF, its HTTP/1.1 server with it.
		b.eof = true
	}
	return n, err
}

// Close is a no-op: the transport closes the body of each try, the server the real one.
func (a *attemptBody) Close() error { return nil }

func (a *attemptBody) detach() {
	a.rb.mu.Lock()
	a.detached = true
	a.rb.mu.Unlock()
}

// retryBudget counts a pool's requests and retries per second over the last 10 s.
type retryBudget struct {
	mu      sync.Mutex
	buckets [10]struct {
		sec               int64
		requests, retries int
	}
}

func (b *retryBudget) bucket(now time.Time) *struct {
	sec               int64
	requests, retries int
} {
	sec := now.Unix()
	bk := &b.buckets[sec%int64(len(b.buckets))]
	if bk.sec != sec {
		bk.sec, bk.requests, bk.retries = sec, 0, 0
	}
	return bk
}

// request counts one request.
func (b *retryBudget) request(now time.Time) {
	b.mu.Lock()
	b.bucket(now).requests++
	b.mu.Unlock()
}

// retry takes one retry from the budget, reporting whether it allows one.
func (b *retryBudget) retry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cut := now.Unix() - int64(len(b.buckets))
	requests, retries := 0, 0
	for _, bk := range b.buckets {
		if bk.sec > cut {
			requests += bk.requests
			retries += bk.retries
		}
	}
	if retries >= minRetries && float64(retries+1) > RetryBudget*float64(requests) {
		return false
	}
	b.bucket(now).retries++
	return true
}

// wrapBody calls done once when the response body is closed, keeping the
// io.ReadWriteCloser of a 101 Switching Protocols response (WebSocket) for the proxy.
func wrapBody(body io.ReadCloser, done func()) io.ReadCloser {
	if rw, ok := body.(io.ReadWriteCloser); ok {
		return &closeRWBody{closeBody: closeBody{ReadCloser: body, done: done}, w: rw}
	}
	return &closeBody{ReadCloser: body, done: done}
}

type closeBody struct {
	io.ReadCloser
	done func()
	once sync.Once
}

func (c *closeBody) Close() error {
	err := c.ReadCloser.Close()
	c.once.Do(c.done)
	return err
}

type closeRWBody struct {
	closeBody
	w io.Writer
}

func (c *closeRWBody) Write(p []byte) (int, error) { return c.w.Write(p) }
