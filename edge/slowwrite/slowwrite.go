// Package slowwrite bounds the waits for writing a response, per request: each write
// of the response (Piece bytes at a time) and each flush must end within the timeout,
// or the response's write deadline is set to now through http.ResponseController —
// on HTTP/2 that resets the stream (the connection carries on), on HTTP/3 the write
// fails and the server cancels the stream, on HTTP/1.1 the connection's write fails
// and the server closes it. The clock runs only while a write waits, so a handler that
// takes its time between writes does not count against the client. It is the per-route
// write_timeout; the connection-wide one is package h2guard's, which also bounds what
// this one cannot see: what the protocol server still holds when the handler returns
// (a few KiB) and a hijacked connection's writes (a WebSocket's).
package slowwrite

import (
	"net/http"
	"sync"
	"time"
)

// Piece is the most one write sends under one timeout: the progress a client must
// make per timeout (as package h2guard asks of a connection).
const Piece = 16 << 10

// Writer is a ResponseWriter whose writes must end within its timeout. Write and
// Flush are called by one goroutine at a time, as a handler's are.
type Writer struct {
	http.ResponseWriter
	d     time.Duration
	timer *time.Timer // fires expire; stopped between writes

	mu      sync.Mutex // orders Stop with arming the timer and with expire
	stopped bool
}

// Watch returns w with its writes bounded by d. The handler must call Stop before it
// returns (a ResponseController must not be used after).
func Watch(w http.ResponseWriter, d time.Duration) *Writer {
	return &Writer{ResponseWriter: w, d: d}
}

func (x *Writer) Write(p []byte) (int, error) {
	n := 0
	for {
		k := min(len(p), Piece)
		if !x.arm() {
			m, err := x.ResponseWriter.Write(p)
			return n + m, err
		}
		m, err := x.ResponseWriter.Write(p[:k])
		x.timer.Stop()
		n += m
		if err != nil || k == len(p) {
			return n, err
		}
		p = p[k:]
	}
}

// Flush sends what is buffered, within the timeout.
func (x *Writer) Flush() { x.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (x *Writer) FlushError() error {
	rc := http.NewResponseController(x.ResponseWriter)
	if !x.arm() {
		return rc.Flush()
	}
	err := rc.Flush()
	x.timer.Stop()
	return err
}

// Unwrap lets http.ResponseController reach the writer beneath (hijack, read
// deadlines, full duplex).
func (x *Writer) Unwrap() http.ResponseWriter { return x.ResponseWriter }

// arm starts the clock for one write; false once Stop was called.
func (x *Writer) arm() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopped {
		return false
	}
	if x.timer == nil {
		x.timer = time.AfterFunc(x.d, x.expire)
	} else {
		x.timer.Reset(x.d)
	}
	return true
}

// expire ends the write in progress. It holds mu so that Stop, which the handler runs
// before it returns, waits for it.
func (x *Writer) expire() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopped {
		return
	}
	http.NewResponseController(x.ResponseWriter).SetWriteDeadline(time.Now())
}

// Stop ends the clock; the handler calls it before it returns.
func (x *Writer) Stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stopped = true
	if x.timer != nil {
		x.timer.Stop()
	}
}
