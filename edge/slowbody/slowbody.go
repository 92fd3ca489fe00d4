// Package slowbody bounds the waits for a request body: a handler (or a proxy) reading
// it must get at least Progress bytes, or the body's end, within each timeout of
// reading, or the read fails with ErrTimeout. The clock runs only while a read waits,
// so an upstream that takes the body slowly does not count against the client. The
// read is aborted through http.ResponseController's read deadline, which works on
// HTTP/1.1, HTTP/2 and HTTP/3 alike.
package slowbody

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTimeout ends a body read that made no progress within its timeout.
var ErrTimeout = errors.New("slowbody: request body made no progress within its timeout")

// Progress is what counts as progress on a request body: a client sending less per
// timeout (34 B/s at 30 s) is holding the server, not uploading.
const Progress = 1 << 10

// Watch returns r with its body bounded by d, and the Body, whose Stop the handler
// must call before it returns (a ResponseController must not be used after). Without
// a body, or with d not positive, it returns r and a nil Body (whose Stop does
// nothing). A read pays a timer reset and two clock readings; only when the timer
// fires does the read get a past deadline.
//
// A request of length 0 without a Content-Length field has no body either: net/http's
// HTTP/2 server gives a request whose HEADERS frame ended the stream a body of its
// own (which reads io.EOF at once) rather than http.NoBody, and ContentLength 0 only
// then (an open stream without the field has -1). With the field, "Content-Length: 0"
// on a stream left open, a read waits for the stream's end: that one is watched.
func Watch(w http.ResponseWriter, r *http.Request, d time.Duration) (*http.Request, *Body) {
	if r.Body == nil || r.Body == http.NoBody || d <= 0 || r.ContentLength == 0 && r.Header["Content-Length"] == nil {
		return r, nil
	}
	b := &Body{ReadCloser: r.Body, w: w, d: d, left: d}
	r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, b))
	r.Body = b
	return r, b
}

// Body is a request body that must make progress (Progress bytes) within d of
// reading. Read is called by one goroutine at a time, as io.Reader's are.
type Body struct {
	io.ReadCloser
	w http.ResponseWriter // its ResponseController is made only when a read times out
	d time.Duration

	left  time.Duration // reading time left before the next Progress bytes are due
	got   int           // bytes read since the last progress
	timer *time.Timer   // fires expire; stopped between reads

	timedOut atomic.Bool
	mu       sync.Mutex // orders Stop with arming the timer and with expire
	stopped  bool
}

func (b *Body) Read(p []byte) (int, error) {
	if b.timedOut.Load() {
		return 0, ErrTimeout
	}
	if !b.arm() {
		return b.ReadCloser.Read(p)
	}
	start := time.Now()
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	if b.timedOut.Load() {
		return n, ErrTimeout
	}
	b.got += n
	if b.got >= Progress || err != nil {
		b.got, b.left = 0, b.d
	} else {
		b.left -= time.Since(start)
	}
	return n, err
}

// arm starts the clock for one read with the time left; false once the handler has
// returned (a late read of the body, by the server discarding what is left).
func (b *Body) arm() bool {
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
// Stop, which the handler runs before it returns, waits for it: a ResponseController
// must not be used once its handler has returned.
func (b *Body) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.timedOut.Store(true)
	http.NewResponseController(b.w).SetReadDeadline(time.Now())
}

// Stop ends the clock; the handler calls it before it returns. A nil Body's does
// nothing.
func (b *Body) Stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.timer != nil {
		b.timer.Stop()
	}
}

// bodyKey is the context key of a request's Body, for the handlers that see only the
// error of a read further down (a proxy's error handler).
type bodyKey struct{}

// TimedOut reports whether r's body read ended at its timeout (r, or a request
// derived from the one Watch returned).
func TimedOut(r *http.Request) bool {
	b, ok := r.Context().Value(bodyKey{}).(*Body)
	return ok && b.timedOut.Load()
}
