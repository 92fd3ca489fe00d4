// Package h1serve serves HTTP/1.1 on an http.Server's TLS connections that did not
// negotiate h2, in place of net/http's own HTTP/1.1 loop, and hands the h2 ones to the
// http.Server. It follows net/http's server: the same request parsing (http.ReadRequest
// and the checks net/http's loop adds), the same answers to bad requests, Content-Length
// worked out for short bodies, chunking, trailers, 1xx responses, 100-continue, HEAD,
// Hijack, ResponseController's deadlines and flushes, the unread-body rule and the
// recovered http.ErrAbortHandler; what it leaves out is cost. net/http pays on every
// request for a goroutine that reads the connection in the background (to notice a
// client that went away), six read-deadline changes and a second buffer of the body.
// Here a request whose handler is still running after bgReadDelay gets the background
// read, so a client that hangs up still cancels its request's context; one answered
// sooner never pays for it, and a request waits with two read-deadline changes. A
// proxied HTTP/1.1 request of issue 16 costs h3edge 12-14 % less CPU than on net/http's
// loop (README, Performance); BenchmarkServe has the server's own cost.
//
// Where it differs from net/http: an empty Host field is refused and an absolute
// target without one is served (http.ReadRequest drops the field before the server sees
// it), http.MaxBytesReader cannot mark the connection for closing (its hook is
// net/http's own; the unread-body rule still bounds what is read), the body left
// unread after a handler is read under the header timeout, not without a deadline,
// no 1xx goes to an HTTP/1.0 client (RFC 9110 §15.2; net/http sends them), and the
// HTTP/2 preface on a connection that negotiated HTTP/1.1 gets 505 (net/http hands
// "PRI * HTTP/2.0" to the handler). Field lines are counted after the parse, not
// during it (readRequest says how); the limit and the 431 are net/http's.
//
// Of the http.Server it serves for, it uses Handler, ReadHeaderTimeout, ReadTimeout,
// WriteTimeout, IdleTimeout, MaxHeaderBytes, ConnState, ConnContext,
// DisableGeneralOptionsHandler and ErrorLog, as net/http does (not BaseContext); a request's context
// carries http.ServerContextKey (the http.Server) and http.LocalAddrContextKey.
package h1serve

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Server serves HTTP/1.1 for an http.Server. Its methods are safe for concurrent use.
type Server struct {
	srv *http.Server

	// ctx is every connection's base context; cancel ends it (Close).
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shaking  map[net.Conn]struct{} // in their TLS handshake (split.dispatch)
	closed   bool                  // Close has begun
	shutdown atomic.Bool           // Shutdown or Close began: no keep-alive, idle connections close
	gone     chan struct{}         // signalled when a connection ends (Shutdown waits on it)
}

// New returns a Server of srv's settings. srv.Serve must be given the listener of
// Split, and srv.Shutdown and srv.Close be matched by the Server's.
func New(srv *http.Server) *Server {
	s := &Server{srv: srv, conns: make(map[*conn]struct{}), shaking: make(map[net.Conn]struct{}), gone: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Split returns the listener to serve srv with: of the connections ln accepts, each
// TLS one (a *tls.Conn, or one that has its HandshakeContext and ConnectionState) has
// its handshake done on a goroutine of its own, under the header timeout; those that
// negotiate h2 and those that are not TLS are accepted from the listener returned,
// the rest are served here. Closing it closes ln.
func (s *Server) Split(ln net.Listener) net.Listener {
	l := &split{Listener: ln, s: s, ch: make(chan accepted), done: make(chan struct{})}
	go l.loop()
	return l
}

type split struct {
	net.Listener
	s    *Server
	ch   chan accepted
	done chan struct{} // closed by Close
	once sync.Once
}

type accepted struct {
	c   net.Conn
	err error
}

type tlsConn interface {
	net.Conn
	HandshakeContext(context.Context) error
	ConnectionState() tls.ConnectionState
}

func (l *split) loop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !l.hand(accepted{nil, err}) {
				return
			}
			// net/http sleeps after a temporary error before it accepts again, and
			// gives up on any other.
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				continue
			}
			return
		}
		tc, ok := c.(tlsConn)
		if !ok {
			if !l.hand(accepted{c, nil}) {
				c.Close()
			}
			continue
		}
		go l.dispatch(tc)
	}
}

// hand gives a to the http.Server's Accept; false once the listener is closed.
func (l *split) hand(a accepted) bool {
	select {
	case l.ch <- a:
		return true
	case <-l.done:
		return false
	}
}

func (l *split) Accept() (net.Conn, error) {
	select {
	case a := <-l.ch:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *split) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// dispatch does c's handshake, then serves it or hands it to the http.Server.
func (l *split) dispatch(c tlsConn) {
	s := l.s
	if !s.handshaking(c, true) {
		s.drop(c) // Close has begun
		return
	}
	defer s.handshaking(c, false)
	if d := s.handshakeTimeout(); d > 0 {
		c.SetDeadline(time.Now().Add(d))
	}
	if err := c.HandshakeContext(s.ctx); err != nil {
		reason := err.Error()
		// As net/http: a client that speaks plain HTTP to the TLS port is told so.
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			re.Conn.Close()
			reason = "client sent an HTTP request to an HTTPS server"
		}
		s.logf("http: TLS handshake error from %s: %v", c.RemoteAddr(), reason)
		s.drop(c)
		return
	}
	c.SetDeadline(time.Time{})
	st := c.ConnectionState()
	if st.NegotiatedProtocol == "h2" {
		// net/http calls ConnState with StateNew, then its HTTP/2 states.
		if !l.hand(accepted{c, nil}) {
			s.drop(c)
		}
		return
	}
	s.setState(c, http.StateNew)
	s.serve(c, &st)
}

// drop closes a connection never served; as net/http's, ConnState hears it New, then
// Closed.
func (s *Server) drop(c net.Conn) {
	c.Close()
	s.setState(c, http.StateNew)
	s.setState(c, http.StateClosed)
}

// looksLikeHTTP is net/http's tlsRecordHeaderLooksLikeHTTP.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// Shutdown ends keep-alive, closes the idle connections, and waits until every
// connection has finished its request and closed, or ctx ends (then it returns
// ctx's error and leaves the rest to Close).
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Store(true)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.closeIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.gone:
		case <-tick.C: // a connection between states when looked at
		}
	}
}

// closeIdle closes the connections waiting for a request (and those that have not
// sent one in 5 s, as net/http) and reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().Unix()
	for c := range s.conns {
		st, since := c.getState()
		if st == http.StateIdle || st == http.StateNew && since < now-5 {
			c.rwc.Close()
		}
	}
	return len(s.conns) == 0
}

// Close closes every connection at once, those still in their TLS handshake too,
// and cancels their requests' contexts.
func (s *Server) Close() error {
	s.shutdown.Store(true)
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.rwc.Close()
	}
	for c := range s.shaking {
		c.Close()
	}
	return nil
}

// handshaking adds c to the connections in their handshake, or takes it out; false:
// Close has begun, c is not added.
func (s *Server) handshaking(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.shaking, c)
		return true
	}
	if s.closed {
		return false
	}
	s.shaking[c] = struct{}{}
	return true
}

func (s *Server) track(c *conn, add bool) {
	s.mu.Lock()
	if add {
		s.conns[c] = struct{}{}
		if s.closed {
			c.rwc.Close() // its reads fail at once
		}
	} else {
		delete(s.conns, c)
	}
	s.mu.Unlock()
	if !add {
		select {
		case s.gone <- struct{}{}:
		default:
		}
	}
}

func (s *Server) setState(c net.Conn, st http.ConnState) {
	if h := s.srv.ConnState; h != nil {
		h(c, st)
	}
}

func (s *Server) logf(format string, args ...any) {
	if l := s.srv.ErrorLog; l != nil {
		l.Printf(format, args...)
	}
}

// handshakeTimeout is net/http's: the least of the timeouts set.
func (s *Server) handshakeTimeout() time.Duration {
	var d time.Duration
	for _, v := range [...]time.Duration{s.srv.ReadHeaderTimeout, s.srv.ReadTimeout, s.srv.WriteTimeout} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

func (s *Server) headerTimeout() time.Duration {
	if d := s.srv.ReadHeaderTimeout; d > 0 {
		return d
	}
	return s.srv.ReadTimeout
}

func (s *Server) idleTimeout() time.Duration {
	if d := s.srv.IdleTimeout; d != 0 {
		return d
	}
	return s.srv.ReadTimeout
}

func (s *Server) maxHeaderBytes() int64 {
	if n := s.srv.MaxHeaderBytes; n > 0 {
		return int64(n)
	}
	return http.DefaultMaxHeaderBytes
}

// maxFields is net/http's limit on the field lines of a request's header section, and
// on those of its trailer section.
func (s *Server) maxFields() int {
	if n := s.srv.MaxHeaderValueCount; n > 0 {
		return n
	}
	return http.DefaultMaxHeaderValueCount
}

// maxPostHandlerReadBytes is net/http's: the most of a request body left unread by
// its handler that is read and dropped to keep the connection; past it, the
// connection is closed after the response.
const maxPostHandlerReadBytes = 256 << 10

// bgReadDelay is how long a handler runs before its connection is read in the
// background, to notice a client that closed it (see the package comment).
const bgReadDelay = 50 * time.Millisecond

// The connections' 4 KiB buffers, as net/http's.
var (
	bufReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	bufWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

// conn is one HTTP/1.1 connection being served.
type conn struct {
	s      *Server
	rwc    tlsConn
	tls    *tls.ConnectionState
	remote string
	cr     connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	// state is the connection's http.ConnState, for Shutdown, and for StateNew since
	// when, in Unix seconds (packed: the state in the low byte, the seconds above).
	state atomic.Int64
	// hijacked is set by Hijack: the connection is no longer the server's.
	hijacked bool
	// bgTimer starts the background read of a request still running (bgReadDelay).
	bgTimer *time.Timer
	// pend holds a response's body until its header is written (response.pending).
	pend [bufferBeforeChunking]byte
	// afterPOST: the last request was a POST, whose client may have sent a CRLF
	// after the body (RFC 9112 §2.2); readRequest skips it, as net/http does.
	afterPOST bool
}

func (c *conn) setState(st http.ConnState) {
	c.state.Store(int64(st)) // since matters only for StateNew (closeIdle), set in serve
	c.s.setState(c.rwc, st)
}

func (c *conn) getState() (http.ConnState, int64) {
	v := c.state.Load()
	return http.ConnState(v & 0xff), v >> 8
}

// errorHeaders ends the status line of the answers to requests that could not be read.
const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (s *Server) serve(rwc tlsConn, st *tls.ConnectionState) {
	c := &conn{s: s, rwc: rwc, tls: st, remote: rwc.RemoteAddr().String()}
	c.cr.c = c
	c.cr.cond.L = &c.cr.mu
	c.state.Store(time.Now().Unix()<<8 | int64(http.StateNew))
	s.track(c, true)
	var w, last *response // the response of the handler running; the last one begun
	defer func() {
		if err := recover(); err != nil && err != http.ErrAbortHandler {
			const size = 64 << 10
			buf := make([]byte, size)
			buf = buf[:runtime.Stack(buf, false)]
			s.logf("http: panic serving %v: %v\n%s", c.remote, err, buf)
		}
		if w != nil {
			w.cancel()
			c.handlerDone()
		}
		if !c.hijacked {
			c.bw.Flush() // what was written before a panic, as net/http's final flush
			rwc.Close()
			if last != nil && last.body != nil {
				// A goroutine of the handler's (a proxy's request writer) may still be
				// reading the body from the connection's reader, which goes back to
				// the pool below.
				last.body.shut()
			}
			c.setState(http.StateClosed)
			c.br.Reset(nil)
			bufReaders.Put(c.br)
			c.bw.Reset(nil)
			bufWriters.Put(c.bw)
		}
		s.track(c, false)
	}()

	ctx := context.WithValue(s.ctx, http.ServerContextKey, s.srv)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, rwc.LocalAddr())
	if f := s.srv.ConnContext; f != nil {
		ctx = f(ctx, rwc)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.br = bufReaders.Get().(*bufio.Reader)
	c.br.Reset(&c.cr)
	c.bw = bufWriters.Get().(*bufio.Writer)
	c.bw.Reset(rwc)

	hdrTimeout := s.headerTimeout()
	if hdrTimeout > 0 {
		rwc.SetReadDeadline(time.Now().Add(hdrTimeout))
	}
	for first := true; ; first = false {
		if !first {
			if c.br.Buffered() == 0 {
				if s.shutdown.Load() {
					return
				}
				c.setState(http.StateIdle)
				if d := s.idleTimeout(); d > 0 {
					rwc.SetReadDeadline(time.Now().Add(d))
				} else {
					rwc.SetReadDeadline(time.Time{})
				}
				if _, err := c.br.Peek(1); err != nil {
					return
				}
			}
			if hdrTimeout > 0 {
				rwc.SetReadDeadline(time.Now().Add(hdrTimeout))
			} else {
				rwc.SetReadDeadline(time.Time{})
			}
		}
		req, err := c.readRequest()
		if err == nil || c.cr.read > 0 {
			c.setState(http.StateActive)
		}
		if s.shutdown.Load() {
			return // as net/http: a request read while shutting down is left unanswered
		}
		if err != nil {
			c.answerUnread(err)
			return
		}
		w = newResponse(c, req, ctx)
		last = w
		req = w.req // with its context and body
		if !w.admit() {
			w.finish()
			return
		}
		c.cr.handlerStart(w)
		if c.bgTimer == nil {
			c.bgTimer = time.AfterFunc(bgReadDelay, c.cr.startBackgroundRead)
		} else {
			c.bgTimer.Reset(bgReadDelay)
		}
		if req.RequestURI == "*" && req.Method == "OPTIONS" && !s.srv.DisableGeneralOptionsHandler {
			globalOptions(w, req)
		} else {
			h := s.srv.Handler
			if h == nil {
				h = http.DefaultServeMux
			}
			h.ServeHTTP(w, req)
		}
		w.cancel()
		c.handlerDone()
		if c.hijacked {
			return
		}
		reuse := w.finish()
		rwc.SetWriteDeadline(time.Time{})
		w = nil
		if !reuse {
			return
		}
	}
}

// handlerDone ends the background read (a byte it read stays for the next request).
func (c *conn) handlerDone() {
	if c.bgTimer != nil {
		c.bgTimer.Stop()
	}
	c.cr.handlerEnd()
}

// readRequest reads a request as net/http's server does: http.ReadRequest under the
// header size limit, then the checks of net/http's loop.
func (c *conn) readRequest() (*http.Request, error) {
	c.cr.setLimit(c.s.maxHeaderBytes() + 4096) // net/http's initialReadLimitSize
	if c.afterPOST {
		peek, _ := c.br.Peek(4) // an error is ReadRequest's to report
		c.br.Discard(leadingCRLF(peek))
	}
	req, err := http.ReadRequest(c.br)
	if err != nil {
		if c.cr.hitLimit() {
			return nil, errTooLarge
		}
		return nil, err
	}
	c.cr.setLimit(-1)
	c.afterPOST = req.Method == "POST"
	// A PRI * HTTP/2.0 line (the HTTP/2 preface on a connection that did not
	// negotiate h2) gets 505 here too: net/http hands it to the handler.
	if req.ProtoMajor != 1 {
		return nil, statusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	}
	// http.ReadRequest has taken Host out of the header (into req.Host, unless the
	// target is absolute, whose host is then req.Host and the field is ignored, RFC
	// 9112 §3.2.2), so whether the field was there is not known. Two differences from
	// net/http follow: an empty Host field is refused here (net/http lets it by), and
	// an absolute target without the field is served (net/http refuses it).
	if req.Host == "" && req.ProtoAtLeast(1, 1) && req.Method != "CONNECT" {
		return nil, statusError{http.StatusBadRequest, "missing required Host header"}
	}
	if !httpguts.ValidHostHeader(req.Host) {
		return nil, statusError{http.StatusBadRequest, "malformed Host header"}
	}
	// textproto, under http.ReadRequest, refuses what httpguts.ValidHeaderFieldValue
	// does, and names with any byte outside a token but a space: the one check of
	// net/http's loop left to make is the names'.
	//
	// http.ReadRequest has no limit on the number of field lines either; net/http's
	// server answers 431 past maxFields. They are counted here, after the parse that
	// MaxHeaderBytes bounds: one per value, one for Host's line if the request has a
	// host and for the Trailer field's if it has trailers (both are taken out of the
	// map), and apart from them the names the Trailer field lists, as net/http counts.
	// Two lines are counted apart from net/http's count: a second Trailer line, and a
	// Cache-Control: no-cache that http.ReadRequest adds for a Pragma: no-cache alone.
	n := 0
	if req.Host != "" {
		n++
	}
	if len(req.Trailer) > 0 {
		n++
	}
	badName := false
	for k, vv := range req.Header {
		badName = badName || !httpguts.ValidHeaderFieldName(k)
		n += len(vv)
	}
	if max := c.s.maxFields(); n > max || len(req.Trailer) > max {
		return nil, errTooLarge // net/http's parse stops at the count, before the names
	}
	if badName {
		return nil, statusError{http.StatusBadRequest, "invalid header name"}
	}
	req.RemoteAddr = c.remote
	req.TLS = c.tls
	c.cr.staleDeadline = false
	if d := c.s.srv.ReadTimeout; d > 0 {
		c.rwc.SetReadDeadline(time.Now().Add(d)) // the body's, from the end of the header
	} else if req.ContentLength != 0 {
		c.rwc.SetReadDeadline(time.Time{})
	} else {
		// No body to read: the header deadline stays until the next request's, unless the
		// background read begins (it lifts it) or the handler sets one.
		c.cr.staleDeadline = true
	}
	if d := c.s.srv.WriteTimeout; d > 0 {
		c.rwc.SetWriteDeadline(time.Now().Add(d))
	}
	return req, nil
}

var errTooLarge = errors.New("http: request too large")

type statusError struct {
	code int
	text string
}

func (e statusError) Error() string { return http.StatusText(e.code) + ": " + e.text }

// answerUnread answers a request that could not be read, as net/http does.
func (c *conn) answerUnread(err error) {
	var se statusError
	switch {
	case err == errTooLarge:
		const publicErr = "431 Request Header Fields Too Large"
		c.bw.WriteString("HTTP/1.1 " + publicErr + errorHeaders + publicErr)
		c.closeWriteAndWait()
	case isUnsupportedTE(err):
		c.bw.WriteString("HTTP/1.1 501 Not Implemented" + errorHeaders + "Unsupported transfer encoding")
	case isCommonNetReadError(err):
		// no answer
	case errors.As(err, &se):
		fmt.Fprintf(c.bw, "HTTP/1.1 %d %s: %s%s%d %s: %s", se.code, http.StatusText(se.code), se.text, errorHeaders, se.code, http.StatusText(se.code), se.text)
	default:
		const publicErr = "400 Bad Request"
		c.bw.WriteString("HTTP/1.1 " + publicErr + errorHeaders + publicErr)
	}
}

// isUnsupportedTE reports whether err is http.ReadRequest's for a Transfer-Encoding it
// does not take (its type is net/http's own, so its text is matched).
func isUnsupportedTE(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unsupported transfer encoding") || strings.HasPrefix(s, "too many transfer encodings")
}

// leadingCRLF is the number of CR and LF bytes p begins with.
func leadingCRLF(p []byte) int {
	n := 0
	for n < len(p) && (p[n] == '\r' || p[n] == '\n') {
		n++
	}
	return n
}

// isCommonNetReadError is net/http's: the reads that end a connection unanswered.
func isCommonNetReadError(err error) bool {
	if err == io.EOF {
		return true
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return true
	}
	if oe, ok := err.(*net.OpError); ok && oe.Op == "read" {
		return true
	}
	return false
}

// closeWriteAndWait flushes, ends the write side, and reads what the client still
// sends for a moment, so that closing does not reset the connection before the
// client has read the answer (net/http sleeps 500 ms instead).
func (c *conn) closeWriteAndWait() {
	c.bw.Flush()
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.rwc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.CopyN(io.Discard, c.rwc, maxPostHandlerReadBytes)
}

// globalOptions is net/http's answer to "OPTIONS *".
func globalOptions(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		io.Copy(io.Discard, io.LimitReader(r.Body, 4<<10))
	}
}
