package metrics

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go/http3"
)

// Recorder is the ResponseWriter Instrument hands the chain: it notes the status code
// and the body's size of the response. It keeps what handlers further in reach for:
// Flush, Hijack (noting the switch), http.ResponseController (through Unwrap: deadlines, full
// duplex) and, on HTTP/3, the stream. Recorders are pooled: one is valid only while its
// request is being served.
type Recorder struct {
	http.ResponseWriter
	code     int
	bytes    int64
	refused  bool   // refused by the stream budget: not a request answered
	hijacked *count // the bytes written to the connection Hijack handed out, or nil
}

// count is the bytes written to a hijacked connection. It is the connection's, not
// the pooled Recorder's: a copying goroutine may write after the handler returned.
type count struct{ n atomic.Int64 }

var recorderPool = sync.Pool{New: func() any { return new(Recorder) }}

// RecorderOf returns the Recorder Instrument wrapped w's response in, or nil when w is
// not one (a handler called without Instrument). It follows the Unwrap methods of the
// writers wrapped around the Recorder (the extended CONNECT's tunnel, the route's
// write timeout).
func RecorderOf(w http.ResponseWriter) *Recorder {
	for {
		switch v := w.(type) {
		case *Recorder:
			return v
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return nil
		}
	}
}

// Status is the response's final status code so far: the first final one written, or
// 200, net/http's answer when the handler writes nothing.
func (r *Recorder) Status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// Bytes is the size of the body written so far, for the access log: after a Hijack,
// what was written to the connection but the switch's own head.
func (r *Recorder) Bytes() int64 {
	if r.hijacked != nil {
		return r.bytes + r.hijacked.n.Load()
	}
	return r.bytes
}

// Refused reports whether MarkRefused was called: the stream budget refused the
// request, which requests_total and the access log then leave out.
func (r *Recorder) Refused() bool { return r.refused }

// MarkRefused tells Instrument that the stream budget refused w's request, which is
// counted in refused_streams_total only. Without a Recorder it does nothing.
func MarkRefused(w http.ResponseWriter) {
	if rec, ok := w.(*Recorder); ok {
		rec.refused = true
	}
}

// WriteHeader notes the first final status and passes it on.
func (r *Recorder) WriteHeader(code int) {
	// Informational answers (103 Early Hints) precede the final one; 101 is final.
	if r.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write notes an implicit 200 and passes b on.
func (r *Recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Flush sends what is buffered (server-sent events, streamed proxying).
func (r *Recorder) Flush() {
	r.FlushError()
}

// FlushError is Flush reporting failure, which http.ResponseController prefers.
func (r *Recorder) FlushError() error {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return http.NewResponseController(r.ResponseWriter).Flush()
}

// Hijack hands the connection over, as http.Hijacker does (through
// http.ResponseController), for a protocol switch: the proxy hijacks only on the
// upstream's 101 Switching Protocols, whose head it then writes into the connection
// itself, so the Recorder notes 101 and counts what is written after the head.
func (r *Recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err != nil {
		return c, brw, err
	}
	if r.code == 0 {
		r.code = http.StatusSwitchingProtocols
	}
	cc := &countedConn{Conn: c, count: new(count)}
	r.hijacked = cc.count
	return cc, brw, nil
}

// countedConn counts the bytes written to a hijacked connection. brw, which carries
// the switch's head, writes to the connection beneath, uncounted.
type countedConn struct {
	net.Conn
	*count
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// Unwrap lets http.ResponseController reach the protocol's own writer.
func (r *Recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// errNoHTTPStream answers HTTPStream on HTTP/1.1 and HTTP/2.
var errNoHTTPStream = errors.New("metrics: not an HTTP/3 request")

// HTTPStream is http3.HTTPStreamer: the request's QUIC stream, on HTTP/3 only.
func (r *Recorder) HTTPStream() (*http3.Stream, error) {
	if s, ok := r.ResponseWriter.(http3.HTTPStreamer); ok {
		return s.HTTPStream()
	}
	return nil, errNoHTTPStream
}
