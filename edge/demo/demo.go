// Package demo is the built-in origin: the handler h3edge serves when no upstream is
// configured, and the one the bare baseline server of bench/scenario serves, so that the
// baseline compares the servers around one handler, not two copies of it. It imports
// the standard library only, which is what lets bench use it without importing edge.
//
// Tests and benchmarks rely on its endpoints:
//
//	/             (any other path too) JSON {proto, remote_addr, client_addr, method, path, body_bytes, headers}
//	/slow?ms=N    waits N ms (at most 60 s), then answers like /
//	/stream?n=N   N server-sent events, 100 ms apart (at most 10 000)
//	/bytes?n=N    N bytes of application/octet-stream (at most 1 GiB)
package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Bounds of the knobs, so that a demo deployment cannot be made to hold requests or
// stream bytes without end.
const (
	MaxSlow   = 60 * time.Second
	MaxEvents = 10000
	MaxBytes  = 1 << 30
)

// Config adapts the origin to the server around it. The zero Config is the origin with
// nothing around it, as the bare baseline serves it.
type Config struct {
	// ClientAddr returns what the echo reports as client_addr. If nil, the host of the
	// request's RemoteAddr is used.
	ClientAddr func(*http.Request) string

	// BadRequest answers a query parameter out of range with status 400 and detail. If
	// nil, http.Error writes detail as plain text.
	BadRequest func(w http.ResponseWriter, r *http.Request, detail string)

	// BodyFailed answers a request whose body could not be read (err is the read's
	// error: a server may fail the read on purpose, as h3edge does once a content-bytes
	// quota runs out). If nil, BadRequest answers "reading the request body failed".
	BodyFailed func(w http.ResponseWriter, r *http.Request, err error)
}

// New returns the demo origin. It is safe for concurrent use.
func New(cfg Config) http.Handler {
	o := &origin{cfg: cfg}
	if o.cfg.ClientAddr == nil {
		o.cfg.ClientAddr = peerHost
	}
	if o.cfg.BadRequest == nil {
		o.cfg.BadRequest = func(w http.ResponseWriter, _ *http.Request, detail string) {
			http.Error(w, detail, http.StatusBadRequest)
		}
	}
	if o.cfg.BodyFailed == nil {
		o.cfg.BodyFailed = func(w http.ResponseWriter, r *http.Request, _ error) {
			o.cfg.BadRequest(w, r, "reading the request body failed")
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", o.echo)
	mux.HandleFunc("/slow", o.slow)
	mux.HandleFunc("/stream", o.stream)
	mux.HandleFunc("/bytes", o.bytes)
	return mux
}

type origin struct{ cfg Config }

// peerHost is the host of r's RemoteAddr, or all of it if it has no port.
func peerHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// echo answers with what the origin saw of the request.
func (o *origin) echo(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		o.cfg.BodyFailed(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Proto      string      `json:"proto"`
		RemoteAddr string      `json:"remote_addr"`
		ClientAddr string      `json:"client_addr"`
		Method     string      `json:"method"`
		Path       string      `json:"path"`
		BodyBytes  int64       `json:"body_bytes"`
		Headers    http.Header `json:"headers"`
	}{r.Proto, r.RemoteAddr, o.cfg.ClientAddr(r), r.Method, r.URL.Path, n, r.Header})
}

// slow is /slow?ms=N: echo after N ms, or nothing if the request ends first.
func (o *origin) slow(w http.ResponseWriter, r *http.Request) {
	ms, ok := o.intParam(w, r, "ms", MaxSlow.Milliseconds())
	if !ok {
		return
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		o.echo(w, r)
	case <-r.Context().Done():
	}
}

// stream is /stream?n=N: N server-sent events, 100 ms apart, each flushed.
func (o *origin) stream(w http.ResponseWriter, r *http.Request) {
	n, ok := o.intParam(w, r, "n", MaxEvents)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := range n {
		if i > 0 {
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "id: %d\ndata: {\"n\":%d,\"unix_ms\":%d}\n\n", i, i, time.Now().UnixMilli())
		if rc.Flush() != nil {
			return
		}
	}
}

// bytes is /bytes?n=N: N bytes of application/octet-stream.
func (o *origin) bytes(w http.ResponseWriter, r *http.Request) {
	n, ok := o.intParam(w, r, "n", MaxBytes)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	for n > 0 {
		k := min(n, int64(len(chunk)))
		if _, err := w.Write(chunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

// chunk is what /bytes writes, 32 KiB at a time: the alphabet, over and over.
var chunk = func() []byte {
	b := make([]byte, 32<<10)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

// intParam reads query parameter name as an integer from 0 to hi, answering 400 if it
// is not one.
func (o *origin) intParam(w http.ResponseWriter, r *http.Request, name string, hi int64) (int64, bool) {
	n, err := strconv.ParseInt(r.URL.Query().Get(name), 10, 64)
	if err != nil || n < 0 || n > hi {
		o.cfg.BadRequest(w, r, fmt.Sprintf("query parameter %s must be an integer from 0 to %d", name, hi))
		return 0, false
	}
	return n, true
}
