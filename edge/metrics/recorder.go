package metrics

import (
	"errors"
	"net/http"
	"sync"

	"github.com/quic-go/quic-go/http3"
)

// Recorder is the ResponseWriter Instrument hands the chain: it notes the status code
// and the body's size of the response. It keeps what handlers further in reach for:
// Flush, http.ResponseController (through Unwrap: deadlines, Hijack for upgrades, full
// duplex) and, on HTTP/3, the stream. Recorders are pooled: one is valid only while its
// request is being served.
type Recorder struct {
	http.ResponseWriter
	code    int
	bytes   int64
	refused bool // refused by the stream budget: not a request answered
}

var recorderPool = sync.Pool{New: func() any { return new(Recorder) }}

// RecorderOf returns the Recorder Instrument wrapped w's response in, or nil when w is
// not one (a handler called without Instrument).
func RecorderOf(w http.ResponseWriter) *Recorder {
	rec, _ := w.(*Recorder)
	return rec
}

// Status is the response's final status code so far: the first final one written, or
// 200, net/http's answer when the handler writes nothing.
func (r *Recorder) Status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// Bytes is the size of the body written so far, for the access log.
func (r *Recorder) Bytes() int64 { return r.bytes }

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
