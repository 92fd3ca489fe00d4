package edge

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// h3Serve serves HTTP/3 with its own stream accept loop over http3.Server's
// RawServerConn, where http3.Server.ServeListener would run quic-go's. The one
// difference is the reason for it: every request stream gets a read deadline
// (headerTimeout) before quic-go reads its HEADERS frame, so a header section still
// incomplete then ends the stream (H3_REQUEST_INCOMPLETE); the handler chain lifts the
// deadline once the request is parsed (liftReadDeadline). quic-go's own loop offers no
// hook between accepting a stream and parsing it.
//
// The price: quic-go keeps a connection's control stream to itself, so shutdown sends
// no GOAWAY on HTTP/3. It does what GOAWAY leads to: new streams are refused with
// H3_REQUEST_REJECTED (a client retries them on a new connection, which the closed
// listener refuses) while the requests in flight finish; Server.Shutdown then closes
// the connections with H3_NO_ERROR once no request has been in flight for a moment
// (shutdownLinger, so the last responses leave first). Its methods are safe for
// concurrent use.
type h3Serve struct {
	srv     *http3.Server
	timeout time.Duration
	log     *slog.Logger

	// stopped is set by shutdown and close: new connections and streams are refused.
	stopped atomic.Bool

	// mu guards the fields below.
	mu    sync.Mutex
	conns map[*h3Conn]struct{}
	empty chan struct{} // closed when conns becomes empty; nil unless shutdown waits
}

// h3Conn is one HTTP/3 connection.
type h3Conn struct {
	conn *quic.Conn
	raw  *http3.RawServerConn
}

func newH3Serve(srv *http3.Server, timeout time.Duration, log *slog.Logger) *h3Serve {
	return &h3Serve{srv: srv, timeout: timeout, log: log, conns: map[*h3Conn]struct{}{}}
}

// serve accepts connections from ln until it is closed; then it returns
// http.ErrServerClosed, as http3.Server.ServeListener does.
func (h *h3Serve) serve(ln http3.QUICListener) error {
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
func (h *h3Serve) serveConn(conn *quic.Conn) {
	raw, err := h.srv.NewRawServerConn(conn)
	if err != nil {
		h.log.Debug("HTTP/3 connection not served", "error", err)
		conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeInternalError), "")
		return
	}
	c := &h3Conn{conn: conn, raw: raw}
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
	for {
		str, err := conn.AcceptStream(context.Background())
		if err != nil {
			return // the connection is closed
		}
		if h.stopped.Load() {
			str.ReleaseStreamCredit()
			str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
			str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
			continue
		}
		str.SetReadDeadline(time.Now().Add(h.timeout))
		go func() {
			// The stack grows here, while the goroutine is empty, rather than twice
			// deeper down: in quic-go's request parsing (crypto/tls's ConnectionState,
			// whose frame grew in Go 1.27) and in the handler (growStack).
			growStack()
			raw.HandleRequestStream(str)
		}()
	}
}

// acceptUni hands the peer's unidirectional streams (control, QPACK) to quic-go.
func (h *h3Serve) acceptUni(c *h3Conn) {
	for {
		str, err := c.conn.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		go c.raw.HandleUnidirectionalStream(str)
	}
}

// remove forgets a closed connection.
func (h *h3Serve) remove(c *h3Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
	if h.empty != nil && len(h.conns) == 0 {
		close(h.empty)
		h.empty = nil
	}
}

// shutdown refuses new streams and waits until every connection has closed, or ctx
// ends (then it closes them and returns ctx's error). Close the listener first.
func (h *h3Serve) shutdown(ctx context.Context) error {
	h.stopped.Store(true)
	h.mu.Lock()
	empty := make(chan struct{})
	if len(h.conns) == 0 {
		close(empty)
	} else {
		h.empty = empty
	}
	h.mu.Unlock()
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
		h.close()
		return ctx.Err()
	}
}

// close closes every connection at once, aborting the requests in flight.
func (h *h3Serve) close() {
	h.stopped.Store(true)
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

// liftReadDeadline removes the header read deadline h3Serve set on an HTTP/3 request's
// stream, once quic-go has parsed the header section: the body may take its time.
func liftReadDeadline(w http.ResponseWriter) {
	http.NewResponseController(w).SetReadDeadline(time.Time{})
}
