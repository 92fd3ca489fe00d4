package edge

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// Bounds of the demo origin's knobs, so a demo deployment cannot be made to hold
// requests or stream bytes without end.
const (
	demoMaxSlow   = 60 * time.Second
	demoMaxEvents = 10000
	demoMaxBytes  = 1 << 30
)

// demoOrigin is the built-in origin used when no upstream is configured. Tests and
// benchmarks rely on its endpoints:
//
//	/             (any other path too) JSON {proto, remote_addr, client_addr, headers, body_bytes}
//	/slow?ms=N    waits N ms (at most 60 s), then answers like /
//	/stream?n=N   N server-sent events, 100 ms apart
//	/bytes?n=N    N bytes of application/octet-stream
func demoOrigin(trusted []netip.Prefix) http.Handler {
	mux := http.NewServeMux()
	echo := func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			if bodyQuotaExceeded(r) {
				writeBodyQuota(w, r)
			} else if bodyTimedOut(r) {
				writeBodyTimeout(w, r)
			} else {
				writeProblem(w, http.StatusBadRequest, "Bad Request", "reading the request body failed")
			}
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
		}{r.Proto, r.RemoteAddr, clientAddr(r, trusted).String(), r.Method, r.URL.Path, n, r.Header})
	}
	mux.HandleFunc("/", echo)
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		ms, ok := intParam(w, r, "ms", 0, demoMaxSlow.Milliseconds())
		if !ok {
			return
		}
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			echo(w, r)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		n, ok := intParam(w, r, "n", 0, demoMaxEvents)
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
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, ok := intParam(w, r, "n", 0, demoMaxBytes)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k := min(n, int64(len(demoChunk)))
			if _, err := w.Write(demoChunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	return mux
}

var demoChunk = func() []byte {
	b := make([]byte, 32<<10)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

// intParam reads query parameter name as an integer in [lo, hi], answering 400 if it is
// not one.
func intParam(w http.ResponseWriter, r *http.Request, name string, lo, hi int64) (int64, bool) {
	v := r.URL.Query().Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		writeProblem(w, http.StatusBadRequest, "Bad Request",
			fmt.Sprintf("query parameter %s must be an integer from %d to %d", name, lo, hi))
		return 0, false
	}
	return n, true
}
