package edge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
)

// Slow clients (limits:). A request body that makes no progress for
// limits.body_read_timeout while the edge waits for it ends with 408; a write to an
// HTTP/1.1 or HTTP/2 connection that makes no progress for limits.write_timeout
// closes the connection (h2HeaderGuard.Write). Both are read from the configuration
// in force for each request or write, so a reload applies them.

// errBodyTimeout ends a body read that made no progress for body_read_timeout.
var errBodyTimeout = errors.New("edge: request body made no progress for limits.body_read_timeout")

// bodyTimeout bounds the waits for a request's body: the handler (or the proxy)
// reading it must get at least bodyProgress bytes, or the body's end, within each
// body_read_timeout of reading. The clock runs only while a read waits, so an upstream
// that takes the body slowly does not count against the client. A read pays a timer
// reset and two clock readings; only when the timer fires does the read get a past
// deadline (http.ResponseController), which aborts it on every protocol.
func (s *Server) bodyTimeout(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		d := s.config().Limits.BodyReadTimeout
		if r.Body == nil || r.Body == http.NoBody || d <= 0 {
			next(w, r, now)
			return
		}
		b := &slowBody{ReadCloser: r.Body, rc: http.NewResponseController(w), d: d, left: d}
		defer b.stop()
		r = r.WithContext(context.WithValue(r.Context(), slowBodyKey{}, b))
		r.Body = b
		next(w, r, now)
	}
}

// bodyProgress is what counts as progress on a request body: a client sending less
// per body_read_timeout (34 B/s at the default 30 s) is holding the edge, not uploading.
const bodyProgress = 1 << 10

// slowBody is a request body that must make progress (bodyProgress bytes) within d of
// reading. Read is called by one goroutine at a time, as io.Reader's are.
type slowBody struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration

	left  time.Duration // reading time left before the next bodyProgress bytes are due
	got   int           // bytes read since the last progress
	timer *time.Timer   // fires expire; stopped between reads

	timedOut atomic.Bool
	mu       sync.Mutex // orders stop with arming the timer and with expire
	stopped  bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.timedOut.Load() {
		return 0, errBodyTimeout
	}
	if !b.arm() {
		return b.ReadCloser.Read(p)
	}
	start := time.Now()
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	if b.timedOut.Load() {
		return n, errBodyTimeout
	}
	b.got += n
	if b.got >= bodyProgress || err != nil {
		b.got, b.left = 0, b.d
	} else {
		b.left -= time.Since(start)
	}
	return n, err
}

// arm starts the clock for one read with the time left; false once the handler has
// returned (a late read of the body, by the server discarding what is left).
func (b *slowBody) arm() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return false
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(max(b.left, 0), b.expire)
	} else {
		b.timer.Reset(max(b.left, 0))
	}
	return true
}

// expire aborts the read in progress: no progress came in time. It holds mu so that
// stop, which the handler runs before it returns, waits for it: a ResponseController
// must not be used once its handler has returned.
func (b *slowBody) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.timedOut.Store(true)
	b.rc.SetReadDeadline(time.Now())
}

// stop ends the clock when the handler returns.
func (b *slowBody) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.timer != nil {
		b.timer.Stop()
	}
}

// slowBodyKey is the context key of a request's slowBody, for the handlers that see
// only the error of a read further down (the proxy's error handler).
type slowBodyKey struct{}

// bodyTimedOut reports whether r's body read ended at body_read_timeout.
func bodyTimedOut(r *http.Request) bool {
	b, ok := r.Context().Value(slowBodyKey{}).(*slowBody)
	return ok && b.timedOut.Load()
}

// writeBodyTimeout answers a request whose body made no progress: 408, and on
// HTTP/1.1 the connection is closed after it, as the body was not read to its end
// (HTTP/2 and HTTP/3 have no Connection field: the stream ends).
func writeBodyTimeout(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header()["Connection"] = []string{"close"}
	}
	answer.Problem(w, r, http.StatusRequestTimeout, "Request Timeout",
		"the request body made no progress for limits.body_read_timeout")
}

// writeTimeout returns limits.write_timeout in force.
func (s *Server) writeTimeout() time.Duration { return s.config().Limits.WriteTimeout }

// notSentLimit is the most the kernel may hold unsent for one TCP connection
// (limitUnsent): enough to keep a fast client's pipe full between two wake-ups of
// the writer.
const notSentLimit = 128 << 10
