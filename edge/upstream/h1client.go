package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// h1Client is the Transport of an http:// target: HTTP/1.1 with keep-alive, the request
// written and the response read on the calling goroutine, on connections it keeps
// itself. net/http's Transport gives every connection a read and a write goroutine and
// hands each request and response over channels; on loopback those hand-offs and the
// scheduler wake-ups they cost were most of the proxy leg's CPU (the proxy scenario,
// `h3bench scenario proxy`, and BenchmarkProxyLeg in this package measure both). The
// wire format is net/http's: the request is written as http.Request.Write writes it
// (h1write.go), the response parsed as http.ReadResponse parses it (h1read.go), so what the origin and the
// client see is what they saw through http.Transport (TestDifferential checks it).
//
// Requests that need a second goroutine go to fallback, a net/http Transport sharing
// the connection cap: Upgrade (the connection becomes a tunnel), Expect: 100-continue
// (the body waits for the origin's word), and request bodies of unknown or more than
// maxInlineBody length, which net/http sends while it reads the response, so that an
// origin answering before it has read a long upload is heard.
type h1Client struct {
	dialer   net.Dialer
	addr     string
	fallback *http.Transport

	mu      sync.Mutex
	idle    []*h1Conn // most recently used last
	open    int       // connections of both legs, idle or busy
	max     int       // 0: no cap
	waiters []chan struct{}

	timeout     time.Duration // the pool's, for the exchange of a request that got a new connection
	readTimeout time.Duration // the pool's, for each wait for a response body's bytes
}

// maxInlineBody is the largest request body (by Content-Length) h1Client writes before
// it reads the response: socket buffers on loopback hold it even if the origin answers
// without reading it.
const maxInlineBody = 64 << 10

// idleTimeout closes connections idle this long.
const idleTimeout = 90 * time.Second

func newH1Client(t Target, cfg *Config, fallback *http.Transport) *h1Client {
	c := &h1Client{
		dialer:   net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		addr:     hostPort(t.URL.Host, "80"),
		fallback: fallback,
		max:      cfg.MaxConnections,
		timeout:  cfg.Timeout,

		readTimeout: cfg.ReadTimeout,
	}
	// The fallback's connections count against the same cap; under a cap it keeps
	// none idle (negative: none), since an idle one there would hold a place that
	// requests here wait for without being told it is free.
	fallback.MaxConnsPerHost = 0
	fallback.MaxIdleConnsPerHost = 2
	if c.max > 0 {
		fallback.MaxIdleConnsPerHost = -1
	}
	fallback.DialContext = c.dialFallback
	return c
}

func hostPort(host, port string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(host, port)
}

// RoundTrip sends req and reads the response header. The response body reads from the
// connection; reading it to the end or closing it gives the connection back.
func (c *h1Client) RoundTrip(req *http.Request) (*http.Response, error) {
	return c.roundTripBy(req, time.Time{}, nil)
}

// roundTripBy is RoundTrip with the wait for the response header bounded by deadline
// (none if zero): the connection's deadlines bound it, and ErrTimeout reports it.
// The wait for a connection (max_connections, the dial) is bounded by deadline too,
// and the exchange on the connection then gets the same time anew: a request that
// queued behind others does not time out on an origin that answers it at once, which
// would count as that origin's failure. The fallback is given a context with the
// deadline instead.
func (c *h1Client) roundTripBy(req *http.Request, deadline time.Time, info informer) (*http.Response, error) {
	body, inline := c.inlineBody(req)
	if !inline {
		return c.fallbackBy(req, deadline, info)
	}
	if body == http.NoBody { // an empty body dropped: a copy that says so (else body is req.Body)
		req = shallowWithBody(req, body)
	}
	hp := headPool.Get().(*[]byte)
	defer func() { *hp = (*hp)[:0]; headPool.Put(hp) }()
	if _, err := appendRequestHead(hp, req); err != nil {
		return c.fallbackBy(req, deadline, info)
	}
	ctx := req.Context()
	for {
		pc, reused, waited, err := c.get(ctx, deadline)
		if err != nil {
			return nil, &notSentError{err: timeoutAs(err, deadline), queued: !isDialError(err)}
		}
		if waited && !deadline.IsZero() && c.timeout > 0 {
			// Dialled, or waited for under max_connections: the exchange gets
			// the whole timeout. An idle connection is had at once.
			deadline = time.Now().Add(c.timeout)
		}
		resp, err := pc.roundTrip(req, *hp, deadline, info)
		if err == nil {
			return resp, nil
		}
		// A connection the origin closed while it was idle fails before a byte of
		// the response: net/http's Transport sends such a request again on a new
		// connection, and so does this one when the request has no body to resend
		// and may be sent twice (the origin may have acted on it before it closed).
		if reused && pc.nread == 0 && (req.Body == nil || req.Body == http.NoBody) && replayable(req) && ctx.Err() == nil {
			continue
		}
		return nil, timeoutAs(err, deadline)
	}
}

// replayable reports whether a request that may have reached the origin can be sent
// again, as net/http's Transport decides: an idempotent method or an Idempotency-Key.
func replayable(req *http.Request) bool {
	if isIdempotent(req) {
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// notSentError is the error of a try that sent nothing: no connection could be had,
// as the dial failed or the wait for one of max_connections outlasted the timeout
// (queued). Such a try is retried whatever the method (isDialError), and a wait for a
// connection is the edge's own queue, not the target's failure (Pool.try).
type notSentError struct {
	err    error
	queued bool
}

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }
func (e *notSentError) Timeout() bool {
	var ne net.Error
	return errors.As(e.err, &ne) && ne.Timeout()
}

// queuedOnly reports whether err is a try's that only waited for a connection.
func queuedOnly(err error) bool {
	var ns *notSentError
	return errors.As(err, &ns) && ns.queued
}

// timeoutAs reports err as ErrTimeout when deadline passed, as Pool.try's context
// reports it for other transports.
func timeoutAs(err error, deadline time.Time) error {
	var ne net.Error
	if !deadline.IsZero() && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(deadline) {
		return ErrTimeout
	}
	return err
}

// fallbackBy sends req through the net/http Transport within deadline, telling info
// of 1xx responses through the context.
func (c *h1Client) fallbackBy(req *http.Request, deadline time.Time, info informer) (*http.Response, error) {
	ctx := req.Context()
	if info != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: info.got1xx})
	}
	if deadline.IsZero() {
		if info != nil {
			req = req.WithContext(ctx)
		}
		return c.fallback.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	d := time.Until(deadline)
	timer := time.AfterFunc(d, func() { cancel(ErrTimeout) })
	req = req.WithContext(ctx)
	var upload *progressBody
	if req.Body != nil && req.Body != http.NoBody {
		upload = &progressBody{ReadCloser: req.Body, timer: timer, d: d}
		req.Body = upload
	}
	resp, err := c.fallback.RoundTrip(req)
	stopTimer(timer, upload)
	if err != nil {
		cancel(nil)
		if context.Cause(ctx) == ErrTimeout {
			err = ErrTimeout
		}
		return nil, err
	}
	body := resp.Body
	if _, upgraded := body.(io.ReadWriteCloser); !upgraded && body != http.NoBody && c.readTimeout > 0 {
		body = newIdleBody(body, c.readTimeout, ctx, cancel, upload)
	}
	resp.Body = wrapBody(body, func() { cancel(nil) })
	return resp, nil
}

// progressBody is a request body whose reads push a try's timer back by the whole
// timeout: the wait for the response header is bounded from the body's end, not its
// start, so an upload that takes longer than the timeout is not ended by it (the
// client's own pace is body_read_timeout's to judge).
type progressBody struct {
	io.ReadCloser
	timer *time.Timer
	d     time.Duration
	last  atomic.Int64 // UnixNano of the last read that brought bytes, for idleBody

	mu      sync.Mutex
	stopped bool // the header came: reads push the timer no more
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 || err == io.EOF {
		b.last.Store(time.Now().UnixNano())
		b.mu.Lock()
		if !b.stopped {
			b.timer.Reset(b.d)
		}
		b.mu.Unlock()
	}
	return n, err
}

// stopTimer stops timer for good, the body b (when not nil) pushing it back no more:
// the response's header came, and the rest of the upload may flow alongside the
// response, which the timer has no business with.
func stopTimer(timer *time.Timer, b *progressBody) {
	if b == nil {
		timer.Stop()
		return
	}
	b.mu.Lock()
	b.stopped = true
	timer.Stop()
	b.mu.Unlock()
}

// inlineBody tells whether req can be sent by h1Client and with which body: none
// (nil), or req.Body as it is. A request of a method that usually has no body and an
// unknown length (HTTP/3 requests have no Content-Length) has its body probed: an
// empty one is dropped, as net/http's Transport drops it; a body with data goes to the
// fallback with the bytes read put back.
func (c *h1Client) inlineBody(req *http.Request) (io.ReadCloser, bool) {
	if req.Method == http.MethodConnect || req.Header["Upgrade"] != nil || req.Header["Expect"] != nil ||
		len(req.TransferEncoding) > 0 || req.Close {
		return nil, false
	}
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true
	}
	switch {
	case req.ContentLength > 0:
		return req.Body, req.ContentLength <= maxInlineBody
	case req.ContentLength == 0:
		return http.NoBody, true
	}
	if !usuallyNoBody(req.Method) {
		return nil, false
	}
	var b [1]byte
	n, err := io.ReadFull(req.Body, b[:])
	if n == 0 && err == io.EOF {
		return http.NoBody, true
	}
	req.Body = readCloser{io.MultiReader(bytes.NewReader(b[:n]), errReader{err}, req.Body), req.Body}
	return nil, false
}

// usuallyNoBody lists the methods net/http probes for a body (requestMethodUsuallyLacksBody).
func usuallyNoBody(m string) bool {
	switch m {
	case "GET", "HEAD", "DELETE", "OPTIONS", "PROPFIND", "SEARCH":
		return true
	}
	return false
}

type readCloser struct {
	io.Reader
	io.Closer
}

// errReader returns err once (nil: nothing), so that a probe's error is not lost.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err == nil || e.err == io.EOF || e.err == io.ErrUnexpectedEOF {
		return 0, io.EOF
	}
	return 0, e.err
}

func shallowWithBody(req *http.Request, body io.ReadCloser) *http.Request {
	out := new(http.Request)
	*out = *req
	out.Body = body
	if body == http.NoBody {
		out.ContentLength = 0
	}
	return out
}

// get returns an idle connection or a new one, waiting within ctx when the cap is
// reached. reused tells that the connection carried a request before; waited, that
// getting it took time (a dial, or a wait for one of the cap).
func (c *h1Client) get(ctx context.Context, deadline time.Time) (pc *h1Conn, reused, waited bool, err error) {
	for {
		c.mu.Lock()
		for n := len(c.idle); n > 0; n = len(c.idle) {
			pc = c.idle[n-1]
			c.idle[n-1] = nil
			c.idle = c.idle[:n-1]
			c.mu.Unlock()
			if pc.alive() {
				return pc, true, waited, nil
			}
			c.closeConn(pc)
			c.mu.Lock()
		}
		if c.max <= 0 || c.open < c.max {
			c.open++
			c.mu.Unlock()
			d := c.dialer
			if !deadline.IsZero() && (d.Deadline.IsZero() || deadline.Before(d.Deadline)) {
				d.Deadline = deadline
			}
			nc, err := d.DialContext(ctx, "tcp", c.addr)
			if err != nil {
				c.release()
				return nil, false, waited, err
			}
			return newH1Conn(c, nc), false, true, nil
		}
		w := make(chan struct{}, 1)
		c.waiters = append(c.waiters, w)
		c.mu.Unlock()
		c.fallback.CloseIdleConnections() // the cap may be held by the fallback's idle ones
		var expired <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			expired = t.C
		}
		waited = true
		select {
		case <-w:
		case <-expired:
			c.dropWaiter(w)
			return nil, false, true, ErrTimeout
		case <-ctx.Done():
			c.dropWaiter(w)
			return nil, false, true, ctx.Err()
		}
	}
}

// dropWaiter takes w off the waiters; a wake-up it got meanwhile goes to the next.
func (c *h1Client) dropWaiter(w chan struct{}) {
	c.mu.Lock()
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	select {
	case <-w:
		c.wakeOne()
	default:
	}
}

// put keeps pc for the next request.
func (c *h1Client) put(pc *h1Conn) {
	now := time.Now()
	pc.idleSince = now
	c.mu.Lock()
	c.idle = append(c.idle, pc)
	var old *h1Conn
	if now.Sub(c.idle[0].idleSince) > idleTimeout {
		old = c.idle[0]
		c.idle = append(c.idle[:0], c.idle[1:]...)
	}
	c.wakeLocked()
	c.mu.Unlock()
	if old != nil {
		c.closeConn(old)
	}
}

// closeConn closes pc and frees its place under the cap.
func (c *h1Client) closeConn(pc *h1Conn) {
	pc.nc.Close()
	c.release()
}

func (c *h1Client) release() {
	c.mu.Lock()
	c.open--
	c.wakeLocked()
	c.mu.Unlock()
}

func (c *h1Client) wakeOne() {
	c.mu.Lock()
	c.wakeLocked()
	c.mu.Unlock()
}

func (c *h1Client) wakeLocked() {
	if len(c.waiters) > 0 {
		c.waiters[0] <- struct{}{}
		c.waiters = c.waiters[1:]
	}
}

// CloseIdleConnections closes the connections of both legs not carrying a request.
func (c *h1Client) CloseIdleConnections() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, pc := range idle {
		c.closeConn(pc)
	}
	c.fallback.CloseIdleConnections()
}

// dialFallback dials for the fallback Transport within the shared cap.
func (c *h1Client) dialFallback(ctx context.Context, network, addr string) (net.Conn, error) {
	for {
		c.mu.Lock()
		if c.max <= 0 || c.open < c.max {
			c.open++
			c.mu.Unlock()
			break
		}
		if n := len(c.idle); n > 0 { // make room: an idle connection of ours goes
			pc := c.idle[0]
			c.idle = append(c.idle[:0], c.idle[1:]...)
			c.mu.Unlock()
			c.closeConn(pc)
			continue
		}
		w := make(chan struct{}, 1)
		c.waiters = append(c.waiters, w)
		c.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return nil, ctx.Err() // a spurious wake-up later is harmless: waiters re-check
		}
	}
	nc, err := c.dialer.DialContext(ctx, network, addr)
	if err != nil {
		c.release()
		return nil, err
	}
	return &capConn{Conn: nc, c: c}, nil
}

// capConn frees its place under the cap when net/http closes it.
type capConn struct {
	net.Conn
	c    *h1Client
	once sync.Once
}

// CloseWrite ends the connection's writing half (a tunnel's client ended its own).
func (cc *capConn) CloseWrite() error {
	if cw, ok := cc.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return errors.New("upstream: the connection cannot close its writing half")
}

func (cc *capConn) Close() error {
	err := cc.Conn.Close()
	cc.once.Do(cc.c.release)
	return err
}

// h1Conn is one connection to the target.
type h1Conn struct {
	c         *h1Client
	nc        net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	nread     int64 // bytes read during the current request
	inHead    bool  // the response header is being read: nread is bounded (maxResponseHeaderBytes)
	idleSince time.Time
	abort     func()               // the watch's action: fail the read or write in progress
	peek      func() (bool, error) // alive's question to the socket (newPeek)

	// The watch of the current request's context. It is armed (context.AfterFunc)
	// by timer watchDelay after the request began, not at once: most exchanges
	// end before, and AfterFunc on a request's new context costs 5 allocations and
	// 0.4 µs (a done channel, the children map, its own context and stop
	// function), a timer's Reset and Stop 0.08 µs and none (BenchmarkContextWatch).
	timer    *time.Timer
	mu       sync.Mutex
	watching context.Context // the current request's; nil between requests
	stop     func() bool     // the armed watch's; nil while not armed
	// readDeadline tells that a read deadline may be set on nc: the last request's
	// bound on its header, left in place when the body had arrived with the header
	// (nothing more is read before the next request sets its own).
	readDeadline bool
}

func newH1Conn(c *h1Client, nc net.Conn) *h1Conn {
	pc := &h1Conn{c: c, nc: nc}
	pc.abort = func() { pc.nc.SetDeadline(aLongTimeAgo) } // made once, not per request
	pc.peek = newPeek(nc)
	pc.br = bufio.NewReaderSize(readCounter{pc}, 4<<10)
	pc.bw = bufio.NewWriterSize(nc, 4<<10)
	return pc
}

type readCounter struct{ pc *h1Conn }

func (r readCounter) Read(p []byte) (int, error) {
	if r.pc.inHead && r.pc.nread >= maxResponseHeaderBytes {
		return 0, errResponseHeaderTooLarge
	}
	n, err := r.pc.nc.Read(p)
	r.pc.nread += int64(n)
	return n, err
}

// maxResponseHeaderBytes bounds what an exchange reads before its final response
// header has ended, 1xx responses included: an origin that sends a header without
// end is not read into memory for ever (net/http's Transport stops at 10 MiB, nginx
// at its proxy_buffer_size of 4-8 KiB). Past it the try fails: 502.
const maxResponseHeaderBytes = 1 << 20

var errResponseHeaderTooLarge = errors.New("upstream: response header over 1 MiB")

// aLongTimeAgo is a deadline in the past: it fails the blocked read or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// alive reports whether an idle connection may carry the next request: the origin
// has neither closed it nor sent anything unasked while it was idle. Bytes no request
// asked for would be read as the next request's response — another client's — so the
// socket itself is asked, before every reuse (newPeek: one non-blocking system call),
// as net/http's Transport learns it from its read goroutine.
//
// Its read buffer is empty: finish keeps no connection with bytes in it, and nothing
// reads an idle one.
func (pc *h1Conn) alive() bool {
	idle, err := pc.peek()
	if err != nil && pc.readDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
		// The last request's header deadline, left in place, has passed while the
		// connection waited: not the origin's doing.
		pc.nc.SetReadDeadline(time.Time{})
		pc.readDeadline = false
		idle, err = pc.peek()
	}
	return err == nil && idle
}

// roundTrip writes req and reads the response header on the calling goroutine. A
// cancelled context fails the read or write in progress through the deadline, within
// watchDelay of the exchange's start.
func (pc *h1Conn) roundTrip(req *http.Request, head []byte, deadline time.Time, info informer) (*http.Response, error) {
	ctx := req.Context()
	pc.nread = 0
	pc.watch(ctx)
	// With a body, the header's deadline is set once the body is sent (below): the
	// time the client took to upload it is not the origin's. Until then no read is
	// made, so a deadline left from the last request does no harm.
	withBody := req.Body != nil && req.Body != http.NoBody && !deadline.IsZero()
	var sending time.Time
	switch {
	case withBody:
		sending = time.Now()
	case !deadline.IsZero():
		// The write of a request of at most maxInlineBody does not block on
		// loopback buffers; the read of the header is what waits for the origin.
		pc.nc.SetReadDeadline(deadline)
		pc.readDeadline = true
	case pc.readDeadline:
		pc.nc.SetReadDeadline(time.Time{})
		pc.readDeadline = false
	}
	fail := func(err error) (*http.Response, error) {
		pc.unwatch()
		pc.c.closeConn(pc)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if err := writeRequest(pc.bw, head, req); err != nil {
		return fail(err)
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(err)
	}
	if withBody {
		pc.nc.SetReadDeadline(deadline.Add(time.Since(sending)))
		pc.readDeadline = true
	}
	var trace *httptrace.ClientTrace
	n1xx := 0
	for {
		pc.inHead = true
		resp, err := readResponse(pc.br, req)
		pc.inHead = false
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode < 100 {
			return fail(fmt.Errorf("upstream: invalid status %03d", resp.StatusCode))
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			// A 101 to a request that asked for no upgrade (those go to the
			// fallback) leaves the connection in another protocol: never kept.
			keep := !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols
			idle := false
			switch {
			case !pc.readDeadline || pc.bodyBuffered(resp):
			case pc.c.readTimeout > 0:
				idle = true // each of the body's reads sets its own deadline (h1Body.Read)
			default:
				pc.nc.SetReadDeadline(time.Time{}) // the body streams as long as it takes
				pc.readDeadline = false
				if ctx.Err() != nil {
					// The watch fired before the line above, or was not armed yet:
					// the body's reads fail, and the connection, whose deadline is
					// in the past, is not to be kept even if its body was buffered.
					pc.nc.SetDeadline(aLongTimeAgo)
					keep = false
				}
			}
			b := &h1Body{pc: pc, ctx: ctx, rc: resp.Body, keep: keep, idle: idle}
			if resp.Body == http.NoBody {
				b.finish(true)
				return resp, nil
			}
			resp.Body = b
			return resp, nil
		}
		// 1xx: passed on (to info, or to a ClientTrace hook as ReverseProxy's), then
		// the real response follows — after at most max1xx of them, as net/http's
		// Transport allows.
		if n1xx++; n1xx > max1xx {
			return fail(errTooMany1xx)
		}
		if info != nil {
			if err := info.got1xx(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err)
			}
			continue
		}
		if trace == nil {
			trace = httptrace.ContextClientTrace(ctx)
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err)
			}
		}
	}
}

// max1xx is how many informational responses may come before the final one
// (net/http's Transport: 5).
const max1xx = 5

var errTooMany1xx = errors.New("upstream: too many 1xx informational responses")

// watchDelay is how long an exchange runs before its context is watched: a client
// that goes away ends the wait for the origin within it. Under load an exchange with
// an origin on loopback takes milliseconds (the proxy scenario's HTTP/3: 18 ms, 256
// requests in flight), so a shorter delay would arm most watches; 50 ms is also how
// long h1serve waits before it reads on behind a handler (a departed HTTP/1.1 client is
// not seen earlier).
const watchDelay = 50 * time.Millisecond

// watch starts the watch of ctx, the current request's context.
func (pc *h1Conn) watch(ctx context.Context) {
	pc.mu.Lock()
	pc.watching = ctx
	pc.mu.Unlock()
	if pc.timer == nil {
		pc.timer = time.AfterFunc(watchDelay, pc.arm)
	} else {
		pc.timer.Reset(watchDelay)
	}
}

// arm is the timer's: the request still runs, its context is watched from now on
// (at once if it has ended already). A late run of a past request's timer arms the
// current one's watch early, which does no harm.
func (pc *h1Conn) arm() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.watching != nil && pc.stop == nil {
		pc.stop = context.AfterFunc(pc.watching, pc.abort)
	}
}

// unwatch ends the watch; false: it fired, and the connection's deadline is in the
// past (the connection is not to be used again).
func (pc *h1Conn) unwatch() bool {
	pc.timer.Stop()
	pc.mu.Lock()
	stop := pc.stop
	pc.watching, pc.stop = nil, nil
	pc.mu.Unlock()
	return stop == nil || stop()
}

// bodyBuffered reports whether resp's body came with its header: it is read from br
// to its end without a read on the connection, so the header's deadline can stay
// (one deadline change less per request: each is a runtime timer update). A chunked
// body or one of unknown length is read from the connection.
func (pc *h1Conn) bodyBuffered(resp *http.Response) bool {
	if resp.Body == http.NoBody {
		return true
	}
	return len(resp.TransferEncoding) == 0 && resp.ContentLength >= 0 && int64(pc.br.Buffered()) >= resp.ContentLength
}

// h1Body is a response body; at its end the connection goes back to the client (or
// is closed: the origin said close, the body was not read to its end, the context
// ended).
//
// One is made per response, not kept in the connection: the proxy closes a body
// after its end, when the connection may carry the next request already.
type h1Body struct {
	pc   *h1Conn
	ctx  context.Context
	rc   io.ReadCloser
	keep bool
	done bool
	idle bool  // read from the connection: each read within the pool's read timeout
	err  error // what Read returns once done
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, b.err
	}
	if b.idle {
		b.pc.nc.SetReadDeadline(time.Now().Add(b.pc.c.readTimeout))
		if err := b.ctx.Err(); err != nil {
			// The context's watch may have set its deadline in the past before the
			// line above moved it: its end stands.
			b.finish(false)
			b.err = err
			return 0, err
		}
	}
	n, err := b.rc.Read(p)
	if err != nil {
		switch {
		case err == io.EOF:
		case b.ctx.Err() != nil:
			err = b.ctx.Err() // the deadline set by the context's watch: say why
		case b.idle && isTimeout(err):
			err = ErrIdle
		}
		b.finish(err == io.EOF)
		b.err = err
	}
	return n, err
}

// isTimeout reports whether err is a passed deadline's (a function of its own, so
// that the error's target is made only on this path).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

var errBodyClosed = errors.New("upstream: read on a closed response body")

// drainWithin reads what is left of the body, up to n bytes and for at most d, so that
// its connection can serve another request; a longer or slower body ends it (Close).
func (b *h1Body) drainWithin(n int64, d time.Duration) {
	if b.done {
		return
	}
	b.idle = false // the deadline set here stands for every read
	b.pc.nc.SetReadDeadline(time.Now().Add(d))
	b.pc.readDeadline = true // alive clears it if it passes while the connection waits
	io.Copy(io.Discard, io.LimitReader(b, n))
}

func (b *h1Body) Close() error {
	if !b.done {
		b.finish(false)
		b.err = errBodyClosed
	}
	return nil
}

// finish ends the request on the connection: keep it when the body was read whole,
// nothing past its end has arrived yet, the origin keeps the connection open, and the
// context's watch had not fired.
func (b *h1Body) finish(whole bool) {
	b.done = true
	pc := b.pc
	// Bytes past the response's end are none of this request's, and no later
	// request's either: the connection is out of step and closed.
	if pc.unwatch() && whole && b.keep && pc.br.Buffered() == 0 {
		pc.c.put(pc)
		return
	}
	pc.c.closeConn(pc)
}
