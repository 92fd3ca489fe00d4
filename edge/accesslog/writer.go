package accesslog

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Format is how a Writer writes entries.
type Format int

const (
	// JSON writes each entry with AppendJSON.
	JSON Format = iota
	// Common writes each entry with AppendCommon.
	Common
)

// Config configures a Writer.
type Config struct {
	// Format is the lines' format. The zero value is JSON.
	Format Format
	// BufferBytes bounds the lines waiting to be written; a line that does not fit is
	// dropped. If zero, 1 MiB is used. The Writer holds twice this: the lines being
	// written and those waiting.
	BufferBytes int
	// Dropped counts the lines dropped: when the buffer is full, when a write fails
	// (each line of it), and when logged after Close. If nil, the Writer counts them
	// itself; a counter shared by successive Writers keeps one count across reloads.
	Dropped *atomic.Uint64
	// OnError is told of each failed write, from the Writer's goroutine. If nil,
	// failures are only counted.
	OnError func(error)
	// FlushInterval is how long a line may wait before it is written: lines are
	// written in batches, when a quarter of the buffer is full or this long after the
	// last write, so that a busy edge makes one write for many lines. If zero, 100ms
	// is used.
	FlushInterval time.Duration
}

// defaultBufferBytes is some seconds of lines at tens of thousands of requests per
// second, enough for a disk's hiccup.
const (
	defaultBufferBytes   = 1 << 20
	defaultFlushInterval = 100 * time.Millisecond
)

// Writer writes entries to an io.Writer from a goroutine of its own, so that Log
// never waits on the output: a line that does not fit in the buffer is dropped and
// counted. Make it with NewWriter and stop it with Close. It is safe for concurrent
// use; Log allocates nothing.
type Writer struct {
	out     io.Writer
	format  Format
	max     int // bytes waiting at most
	flushAt int // bytes waiting that wake run before its tick
	every   time.Duration
	dropped *atomic.Uint64
	onError func(error)

	// mu guards buf, the lines waiting (at most max bytes, never reallocated), and
	// closed.
	mu     sync.Mutex
	buf    []byte
	closed bool

	wake     chan struct{} // cap 1: flushAt bytes are waiting
	done     chan struct{} // closed by Close
	finished chan struct{} // closed by run once everything is written
}

// NewWriter starts a Writer writing to out. out is written from one goroutine only,
// whole lines at a time.
func NewWriter(out io.Writer, c Config) *Writer {
	w := &Writer{out: out, format: c.Format, max: c.BufferBytes, every: c.FlushInterval, dropped: c.Dropped,
		onError: c.OnError, wake: make(chan struct{}, 1), done: make(chan struct{}), finished: make(chan struct{})}
	if w.max <= 0 {
		w.max = defaultBufferBytes
	}
	if w.every <= 0 {
		w.every = defaultFlushInterval
	}
	w.flushAt = w.max / 4
	if w.dropped == nil {
		w.dropped = new(atomic.Uint64)
	}
	w.buf = make([]byte, 0, w.max)
	go w.run(make([]byte, 0, w.max))
	return w
}

// linePool holds the buffers lines are formatted in, outside the lock.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Log formats e and queues its line, or drops it when the buffer is full or the
// Writer is closed. It does not keep e.
func (w *Writer) Log(e *Entry) {
	bp := linePool.Get().(*[]byte)
	line := (*bp)[:0]
	if w.format == Common {
		line = AppendCommon(line, e)
	} else {
		line = AppendJSON(line, e)
	}
	w.mu.Lock()
	ok := !w.closed && len(w.buf)+len(line) <= w.max
	if ok {
		w.buf = append(w.buf, line...)
	}
	full := len(w.buf) >= w.flushAt
	w.mu.Unlock()
	*bp = line
	linePool.Put(bp)
	if !ok {
		w.dropped.Add(1)
	}
	if full {
		select {
		case w.wake <- struct{}{}:
		default: // run is awake already and will find the lines
		}
	}
}

// Dropped returns the lines dropped so far (Config.Dropped, if it was set).
func (w *Writer) Dropped() uint64 { return w.dropped.Load() }

// run writes what is waiting at every tick and whenever Log wakes it, swapping
// buffers so that Log appends to one while the other is written; after Close it
// writes the rest.
func (w *Writer) run(spare []byte) {
	defer close(w.finished)
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case <-w.wake:
		case <-tick.C:
		case <-w.done:
			w.mu.Lock()
			spare, w.buf = w.buf, spare[:0]
			w.mu.Unlock()
			w.write(spare)
			return
		}
		w.mu.Lock()
		spare, w.buf = w.buf, spare[:0]
		w.mu.Unlock()
		w.write(spare)
	}
}

// write writes whole lines to out; if it fails, their lines count as dropped.
func (w *Writer) write(p []byte) {
	if len(p) == 0 {
		return
	}
	if _, err := w.out.Write(p); err != nil {
		w.dropped.Add(uint64(bytes.Count(p, []byte{'\n'})))
		if w.onError != nil {
			w.onError(err)
		}
	}
}

// Close writes the lines waiting, stops the goroutine and returns; later lines are
// dropped. It does not close the output, and waits for a write in progress, so an
// output that never returns holds it up.
func (w *Writer) Close() {
	w.mu.Lock()
	first := !w.closed
	w.closed = true
	w.mu.Unlock()
	if first {
		close(w.done)
	}
	<-w.finished
}
