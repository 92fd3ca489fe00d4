package h1serve

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// connReader is what the connection's bufio.Reader reads from: the connection under
// the header size limit, and the one byte a background read may have taken. It is
// net/http's connReader, with the background read started by a timer
// (startBackgroundRead) instead of for every request.
type connReader struct {
	c *conn

	mu      sync.Mutex
	cond    sync.Cond // signalled when a read ends
	inRead  bool      // a read of the connection is in progress
	bg      bool      // it is the background read
	aborted bool      // abortLocked ended it
	hasByte bool
	byteBuf [1]byte
	remain  int64 // what the header limit lets through; < 0: no limit
	read    int64 // bytes read since setLimit

	// running is set while a handler runs, w being its response; fired once the
	// timer did (a body still being read then starts the background read at its end).
	running bool
	fired   bool
	w       *response
	// staleDeadline: the header read deadline is still set (a request without a body);
	// the background read lifts it first.
	staleDeadline bool
}

// aLongTimeAgo is a read deadline that ends a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

func (cr *connReader) setLimit(n int64) {
	cr.mu.Lock()
	cr.remain, cr.read = n, 0
	cr.mu.Unlock()
}

func (cr *connReader) hitLimit() bool {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return cr.remain == 0
}

func (cr *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	cr.mu.Lock()
	cr.abortLocked() // a read of the handler's, or of the next request, has the connection
	if cr.hasByte {
		p[0] = cr.byteBuf[0]
		cr.hasByte = false
		cr.read++
		if cr.remain > 0 {
			cr.remain--
		}
		cr.mu.Unlock()
		return 1, nil
	}
	if cr.remain == 0 {
		cr.mu.Unlock()
		return 0, io.EOF
	}
	if cr.remain > 0 && int64(len(p)) > cr.remain {
		p = p[:cr.remain]
	}
	cr.inRead = true
	cr.mu.Unlock()
	n, err := cr.c.rwc.Read(p)
	cr.mu.Lock()
	cr.inRead = false
	cr.read += int64(n)
	if cr.remain > 0 {
		cr.remain -= int64(n)
	}
	if err != nil && cr.w != nil {
		cr.w.cancel() // as net/http: a failed read of the connection ends the request
	}
	cr.mu.Unlock()
	cr.cond.Broadcast()
	return n, err
}

func (cr *connReader) handlerStart(w *response) {
	cr.mu.Lock()
	cr.running, cr.fired, cr.w = true, false, w
	cr.mu.Unlock()
}

// handlerEnd stops the background read, if one runs, and waits for it.
func (cr *connReader) handlerEnd() {
	cr.mu.Lock()
	cr.running = false
	cr.abortLocked()
	cr.w = nil
	cr.mu.Unlock()
}

// startBackgroundRead is the timer's: a handler has run for bgReadDelay. Unless its
// request body is still being read, a goroutine reads the connection until the handler
// ends, so that a client that closes it cancels the request's context.
func (cr *connReader) startBackgroundRead() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.fired = true
	cr.startLocked()
}

// bodyDone is called when the request body has been read to its end.
func (cr *connReader) bodyDone() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.fired {
		cr.startLocked()
	}
}

func (cr *connReader) startLocked() {
	if !cr.running || cr.inRead || cr.hasByte { // Hijack clears running
		return
	}
	if b := cr.w.body; b != nil && !b.eof.Load() {
		return // bodyDone starts it
	}
	if cr.staleDeadline {
		cr.c.rwc.SetReadDeadline(time.Time{})
		cr.staleDeadline = false
	}
	cr.inRead, cr.bg = true, true
	go cr.backgroundRead()
	if testHookBackgroundRead != nil {
		testHookBackgroundRead(0)
	}
}

// testHookBackgroundRead, when set by a test, is called when a background read begins
// (with 0) and when it has read (with the bytes it read, 1 or 0).
var testHookBackgroundRead func(n int)

func (cr *connReader) backgroundRead() {
	n, err := cr.c.rwc.Read(cr.byteBuf[:])
	if testHookBackgroundRead != nil {
		testHookBackgroundRead(n)
	}
	cr.mu.Lock()
	if n == 1 {
		cr.hasByte = true // the start of the next request (pipelined), kept for it
	}
	if ne, ok := err.(net.Error); ok && cr.aborted && ne.Timeout() {
		// abortLocked's deadline: expected
	} else if err != nil && cr.w != nil {
		cr.w.cancel()
	}
	cr.aborted, cr.inRead, cr.bg = false, false, false
	cr.mu.Unlock()
	cr.cond.Broadcast()
}

// abortLocked ends the background read, if one is in progress, and waits for it.
func (cr *connReader) abortLocked() {
	if !cr.inRead {
		return
	}
	if !cr.bg {
		return // the handler's own read (a hijacked connection's): not ours to end
	}
	cr.aborted = true
	cr.c.rwc.SetReadDeadline(aLongTimeAgo)
	for cr.inRead {
		cr.cond.Wait()
	}
	cr.c.rwc.SetReadDeadline(time.Time{})
}

// body is a request's body as handlers see it: http.ReadRequest's, with net/http's
// server rules — Close does not read the rest (the server decides after the handler),
// the first Read sends 100 Continue when the client asked for it, its end gives the
// handler's request the trailers (at most maxFields lines), and lets the background
// read begin.
type body struct {
	src io.ReadCloser
	w   *response
	// read is the request http.ReadRequest returned, whose Trailer its body fills;
	// the handler has a copy (WithContext), given the map at the end.
	read *http.Request

	mu     sync.Mutex
	n      int64 // bytes read
	closed atomic.Bool
	eof    atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof.Load() {
		return 0, io.EOF
	}
	b.w.writeContinue()
	n, err := b.src.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		if !b.trailersFit() {
			return n, errTrailerTooLarge
		}
		if t := b.read.Trailer; t != nil {
			// A field RFC 9110 §6.5.1 keeps out of trailers (framing, routing,
			// authentication, Content-Type and the like) is dropped: net/http passes it
			// on, but HTTP/2's and HTTP/3's servers refuse the request, and a proxy
			// must not send it on to the origin. Only undeclared ones can be here:
			// http.ReadRequest refuses such a name in the Trailer field.
			for k := range t {
				if !httpguts.ValidTrailerHeader(k) {
					delete(t, k)
				}
			}
			b.w.req.Trailer = t // nil when the client sent trailers it had not declared
		}
		b.eof.Store(true)
		b.w.c.cr.bodyDone()
	}
	return n, err
}

var errTrailerTooLarge = errors.New("http: too many request trailer fields")

// trailersFit reports whether the trailer section read has at most maxFields lines.
// Past them, as on net/http's server, the body fails and the connection is not kept.
func (b *body) trailersFit() bool {
	n := 0
	for _, vv := range b.read.Trailer {
		n += len(vv)
	}
	if n > b.w.c.s.maxFields() {
		b.closed.Store(true)
		return false
	}
	return true
}

func (b *body) Close() error {
	b.closed.Store(true)
	return nil
}

// tooBig reports whether more of the body is left than the server would read to keep
// the connection (a declared length; a chunked body is tried).
func (b *body) tooBig() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cl := b.w.req.ContentLength
	return !b.eof.Load() && cl > 0 && cl-b.n >= maxPostHandlerReadBytes
}

// discard reads and drops what is left of the body, up to maxPostHandlerReadBytes,
// and reports whether it reached the end; then the body is closed.
func (b *body) discard() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.eof.Load() {
		b.closed.Store(true)
		return true
	}
	if b.closed.Swap(true) {
		return false // closed by the handler before its end
	}
	if cl := b.w.req.ContentLength; cl > 0 && cl-b.n >= maxPostHandlerReadBytes {
		return false
	}
	_, err := io.CopyN(io.Discard, b.src, maxPostHandlerReadBytes+1)
	if err == io.EOF {
		if !b.trailersFit() {
			return false
		}
		b.eof.Store(true)
		b.w.c.cr.bodyDone() // a handler still running may get its background read now
		return true
	}
	return false
}

// shut waits for a Read in progress (the connection is closed by then, so it ends)
// and makes later ones fail: the server is about to reuse the connection's reader.
func (b *body) shut() {
	b.mu.Lock()
	b.closed.Store(true)
	b.mu.Unlock()
}
