// Package h3serve serves HTTP/3 with its own stream accept loop over quic-go's
// http3.RawServerConn, so that every request stream gets a header read deadline
// before quic-go parses its HEADERS frame, and a stream budget is charged when the
// stream is accepted. Its own loop also lets it serve the request streams of connections
// that finish their requests on reused goroutines (Server.worker), and tell the handler
// when a request has no body (Begin). It knows nothing of the edge: the budget is
// Config.Admit.
package h3serve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Server serves HTTP/3 with its own stream accept loop over http3.Server's
// RawServerConn, where http3.Server.ServeListener would run quic-go's. The one
// difference is the reason for it: every request stream gets a read deadline
// (Config.HeaderTimeout) before quic-go reads its HEADERS frame, so a header section still
// incomplete then ends the stream (H3_REQUEST_INCOMPLETE); the handler chain lifts the
// deadline once the request is parsed (LiftReadDeadline). quic-go's own loop offers no
// hook between accepting a stream and parsing it.
//
// The price: quic-go keeps a connection's control stream to itself, so shutdown sends
// no GOAWAY on HTTP/3. It does what GOAWAY leads to: new streams are refused with
// H3_REQUEST_REJECTED (a client retries them on a new connection, which the closed
// listener refuses) while the requests in flight finish; each connection is then
// closed with H3_NO_ERROR once its last request stream is done and a linger of a few
// round trips has let the last responses be acknowledged (drainLinger). A connection
// counts as gone only when its request goroutines have returned, so Shutdown returns
// after every HTTP/3 handler. Its methods are safe for concurrent use.
type Server struct {
	srv *http3.Server
	c   Config

	// stopped is set by Shutdown and Close: new connections and streams are refused.
	stopped atomic.Bool

	// opening holds each connection while quic-go makes its RawServerConn, so that
	// the ConnContext hook (New) finds the *h3Conn of its *quic.Conn.
	opening sync.Map

	// work hands a request stream to a worker waiting for one (worker); unbuffered,
	// so a send succeeds only when one waits. idle counts the waiting workers.
	work chan job
	idle atomic.Int32
	// done is closed by Shutdown and Close: the waiting workers end.
	done     chan struct{}
	doneOnce sync.Once

	// mu guards the fields below.
	mu    sync.Mutex
	conns map[*h3Conn]struct{}
	empty chan struct{} // closed when conns becomes empty; nil until Shutdown waits
}

// h3Conn is one HTTP/3 connection.
type h3Conn struct {
	conn *quic.Conn
	raw  *http3.RawServerConn

	// mu guards the fields below. A stream is started under it only while the server
	// is not stopped, so once stopped is set and idle seen closed, no stream follows.
	mu      sync.Mutex
	active  int                            // request streams being handled
	served  int                            // request streams handled to the end
	idle    chan struct{}                  // closed when active falls to 0; nil unless waited for
	streams map[quic.StreamID]*quic.Stream // the request streams being handled, for Begin
}

// start counts a request stream in, or reports ok false once the server has stopped.
// grow tells whether the stream goes to a worker, whose stack is grown before quic-go
// reads the request (Server.worker), or to a goroutine of its own that keeps its small
// starting stack: a worker only while the connection has finished at least as many
// requests as it has open. A grown stack is 32 KiB, held while the stream waits for its HEADERS; a
// connection that opens streams and never finishes them (stream exhaustion) keeps its
// goroutines at their small starting size (measured: 2 000 stalled streams cost 10 kB
// each, 26 kB each with the stacks grown).
func (c *h3Conn) start(h *Server, str *quic.Stream) (ok, grow bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.stopped.Load() {
		return false, false
	}
	c.active++
	if str != nil {
		if c.streams == nil {
			c.streams = map[quic.StreamID]*quic.Stream{}
		}
		c.streams[str.StreamID()] = str
	}
	return true, c.served >= c.active
}

// end counts a request stream out, once its handler has returned and quic-go has
// finished its response.
func (c *h3Conn) end(id quic.StreamID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.streams, id)
	c.served++
	if c.active--; c.active == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// waitIdle returns a channel closed when no request stream is being handled.
func (c *h3Conn) waitIdle() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	switch {
	case c.active == 0:
		close(ch)
	case c.idle != nil:
		ch = c.idle
	default:
		c.idle = ch
	}
	return ch
}

// Config is what a Server needs beyond its http3.Server.
type Config struct {
	// HeaderTimeout is each request stream's read deadline until quic-go has parsed
	// its header section (the handler lifts it: LiftReadDeadline).
	HeaderTimeout time.Duration
	// Admit charges a new request stream to its source's stream budget when it is
	// accepted, before its HEADERS are read: a stream that never sends them (stream
	// exhaustion) costs its source as much as a request. False: refused. Nil: all
	// admitted.
	Admit func(addr netip.Addr) bool
	// Grow grows a request goroutine's stack before quic-go parses the request, on
	// connections that finish their requests (h3Conn.start); nil: not grown.
	Grow func()
	// Linger is the least a draining connection stays open after its last response
	// (drainLinger).
	Linger time.Duration
	// Log gets the connections that could not be served, at debug level.
	Log *slog.Logger
}

// New returns a Server of srv's handler and settings. It wraps srv.ConnContext, so
// that each connection's context tells Begin where its request streams are, and
// srv.Logger, so that quic-go's Debug line of each request names its target without
// the query, which may carry an API key (queryless).
func New(srv *http3.Server, c Config) *Server {
	h := &Server{srv: srv, c: c, conns: map[*h3Conn]struct{}{}, work: make(chan job), done: make(chan struct{})}
	if srv.Logger != nil {
		srv.Logger = slog.New(queryless{srv.Logger.Handler()})
	}
	outer := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, conn *quic.Conn) context.Context {
		if c, ok := h.opening.Load(conn); ok {
			ctx = context.WithValue(ctx, connKey{}, c)
		}
		if outer != nil {
			ctx = outer(ctx, conn)
		}
		return ctx
	}
	return h
}

// connKey is the context key of a connection's *h3Conn.
type connKey struct{}

// Serve accepts connections from ln until it is closed; then it returns
// http.ErrServerClosed, as http3.Server.ServeListener does.
func (h *Server) Serve(ln http3.QUICListener) error {
	for {
		conn, err := ln.Accept(context.Background())
		if errors.Is(err, quic.ErrServerClosed) || h.stopped.Load() {
			if conn != nil {
				conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			}
			return http.ErrServerClosed
		}
		if err != nil {
			return err
		}
		go h.serveConn(conn)
	}
}

// serveConn runs one connection's stream accept loop, as http3.Server does.
func (h *Server) serveConn(conn *quic.Conn) {
	c := &h3Conn{conn: conn}
	h.opening.Store(conn, c)
	raw, err := h.srv.NewRawServerConn(conn)
	h.opening.Delete(conn)
	if err != nil {
		h.c.Log.Debug("HTTP/3 connection not served", "error", err)
		conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeInternalError), "")
		return
	}
	c.raw = raw
	h.mu.Lock()
	if h.stopped.Load() {
		h.mu.Unlock()
		raw.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
		return
	}
	h.conns[c] = struct{}{}
	h.mu.Unlock()
	defer h.remove(c)

	go h.acceptUni(c)
	var peer netip.Addr
	if ua, ok := conn.RemoteAddr().(*net.UDPAddr); ok {
		peer = ua.AddrPort().Addr().Unmap()
	}
	for {
		str, err := conn.AcceptStream(context.Background())
		if err != nil {
			<-c.waitIdle() // the connection is closed: gone once its handlers are
			return
		}
		if h.c.Admit != nil && !h.c.Admit(peer) {
			rejectStream(str)
			continue
		}
		ok, grow := c.start(h, str)
		if !ok {
			rejectStream(str)
			continue
		}
		str.SetReadDeadline(time.Now().Add(h.c.HeaderTimeout))
		if !grow {
			go c.serve(str) // small stack, its own goroutine: see h3Conn.start
			continue
		}
		select {
		case h.work <- job{c, str}:
		default:
			go h.worker(job{c, str})
		}
	}
}

// job is a request stream for a worker.
type job struct {
	c   *h3Conn
	str *quic.Stream
}

// maxIdleWorkers bounds the workers waiting for a stream (worker): each holds a grown
// stack (32 KiB, which the collector shrinks while it waits).
const maxIdleWorkers = 256

// worker serves request streams of connections that finish their requests
// (h3Conn.start), one after the other: after each it waits for the next one, unless
// maxIdleWorkers wait already. A new goroutine per request would start with a small
// stack and grow it again (Config.Grow) — 1.3-1.5 µs of CPU per request with the
// growth and the large stack's allocation and release (BenchmarkGrowStack in package
// edge), against a hand-off on a channel to a goroutine whose stack has the room.
func (h *Server) worker(j job) {
	// The stack grows here, while the goroutine is empty, rather than deeper down in
	// quic-go's request parsing (crypto/tls's ConnectionState, whose frame grew in Go
	// 1.27) and again in the handler: the handler's own growth then finds the room
	// there. The collector may shrink it while the worker waits; a later request then
	// grows it where it needs to.
	if h.c.Grow != nil {
		h.c.Grow()
	}
	for {
		j.c.serve(j.str)
		if h.idle.Add(1) > maxIdleWorkers {
			h.idle.Add(-1)
			return
		}
		j = job{} // hold no finished connection while waiting
		select {
		case j = <-h.work:
			h.idle.Add(-1)
		case <-h.done:
			h.idle.Add(-1)
			return
		}
	}
}

// serve has quic-go handle one request stream, counted in by start.
func (c *h3Conn) serve(str *quic.Stream) {
	defer c.end(str.StreamID())
	c.raw.HandleRequestStream(str)
}

// rejectStream refuses a request stream unread: H3_REQUEST_REJECTED both ways, and its
// credit back to the peer at once.
func rejectStream(str *quic.Stream) {
	str.ReleaseStreamCredit()
	str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
	str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
}

// acceptUni hands the peer's unidirectional streams (control, QPACK) to quic-go.
func (h *Server) acceptUni(c *h3Conn) {
	for {
		str, err := c.conn.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		go c.raw.HandleUnidirectionalStream(str)
	}
}

// remove forgets a closed connection.
func (h *Server) remove(c *h3Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
	if h.empty != nil && len(h.conns) == 0 {
		select {
		case <-h.empty:
		default:
			close(h.empty)
		}
	}
}

// Shutdown refuses new streams, closes each connection once its request streams are
// done and drainLinger has passed, and waits until every connection is gone, or ctx
// ends (then it closes them and returns ctx's error). Close the listener first.
func (h *Server) Shutdown(ctx context.Context) error {
	h.stop()
	h.mu.Lock()
	if h.empty == nil {
		h.empty = make(chan struct{})
		if len(h.conns) == 0 {
			close(h.empty)
		}
	}
	empty := h.empty
	for c := range h.conns {
		go h.drain(ctx, c)
	}
	h.mu.Unlock()
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
		h.Close()
		return ctx.Err()
	}
}

// stop refuses new connections and streams and ends the waiting workers.
func (h *Server) stop() {
	h.stopped.Store(true)
	h.doneOnce.Do(func() { close(h.done) })
}

// drainLinger is how long a draining connection stays open after its last response:
// the responses' last packets need about a round trip to be acknowledged, and a close
// discards what is not.
func (h *Server) drainLinger(c *quic.Conn) time.Duration {
	return max(h.c.Linger, 4*c.ConnectionStats().SmoothedRTT)
}

// drain closes c once its request streams are done and drainLinger has passed.
func (h *Server) drain(ctx context.Context, c *h3Conn) {
	select {
	case <-c.waitIdle():
	case <-c.conn.Context().Done():
		return
	case <-ctx.Done():
		return
	}
	t := time.NewTimer(h.drainLinger(c.conn))
	defer t.Stop()
	select {
	case <-t.C:
		c.raw.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	case <-c.conn.Context().Done():
	case <-ctx.Done():
	}
}

// Close closes every connection at once, aborting the requests in flight.
func (h *Server) Close() {
	h.stop()
	h.mu.Lock()
	conns := make([]*h3Conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.raw.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}
}

// Begin is what the handler does first with an HTTP/3 request a Server serves. It
// lifts the header read deadline Server set on the request's stream, now that quic-go
// has parsed the header section (the body may take its time), and when the stream
// ended with its header section — the peer's FIN received and nothing after the
// HEADERS frame — it sets r.Body to http.NoBody and r.ContentLength to 0, as
// net/http's HTTP/2 server does for a HEADERS frame with END_STREAM. quic-go gives
// every request a body whose first read finds out that it is empty; a handler that
// sees http.NoBody skips all its body work: no body-timeout watch, no probe for a body
// to forward, no Close that cancels the stream's read side. A stream that is still
// open (its FIN, or a body, yet to come or not yet read) keeps its body, as does a
// CONNECT (a tunnel) and a request announcing Content-Length above 0.
//
// r is changed in place: it is quic-go's request, which quic-go does not look at once
// the handler runs, and a copy would cost an allocation per request. A request that
// no Server serves (an http3.Server of its own) only has its read deadline lifted.
func Begin(w http.ResponseWriter, r *http.Request) {
	str := requestStream(r)
	if str == nil {
		LiftReadDeadline(w)
		return
	}
	if r.ContentLength <= 0 && r.Method != http.MethodConnect && r.Body != nil && r.Body != http.NoBody {
		// A deadline already past makes Peek answer at once: io.EOF when the
		// stream has ended and everything before its end was read, the deadline's
		// error otherwise — also when data is waiting, which a body may be.
		str.SetReadDeadline(pastDeadline)
		var b [1]byte
		if n, err := str.Peek(b[:]); n == 0 && err == io.EOF {
			r.Body, r.ContentLength = http.NoBody, 0
		}
	}
	str.SetReadDeadline(time.Time{})
}

// pastDeadline is a read deadline that has passed (quic-go treats the zero time as
// none).
var pastDeadline = time.Unix(1, 0)

// requestStream returns the QUIC stream of r, an HTTP/3 request served by a Server,
// or nil. quic-go's request body names its stream's ID.
func requestStream(r *http.Request) *quic.Stream {
	c, _ := r.Context().Value(connKey{}).(*h3Conn)
	b, ok := r.Body.(interface{ StreamID() quic.StreamID })
	if c == nil || !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[b.StreamID()]
}

// LiftReadDeadline removes the header read deadline Server set on an HTTP/3 request's
// stream, once quic-go has parsed the header section: the body may take its time.
// Begin does it for the requests a Server serves.
func LiftReadDeadline(w http.ResponseWriter) {
	http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// queryless is the slog.Handler of quic-go's http3 server: it cuts the query from the
// request target of the Debug line quic-go logs for every request (its attribute
// "uri"), as the access log does, since a query may carry a client's API key.
type queryless struct{ slog.Handler }

func (h queryless) Handle(ctx context.Context, r slog.Record) error {
	cut := false
	r.Attrs(func(a slog.Attr) bool {
		cut = a.Key == "uri" && strings.Contains(a.Value.String(), "?")
		return !cut
	})
	if !cut {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "uri" {
			path, _, _ := strings.Cut(a.Value.String(), "?")
			a = slog.String(a.Key, path)
		}
		out.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h queryless) WithAttrs(as []slog.Attr) slog.Handler { return queryless{h.Handler.WithAttrs(as)} }
func (h queryless) WithGroup(name string) slog.Handler    { return queryless{h.Handler.WithGroup(name)} }
