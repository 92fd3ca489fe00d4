package edge

import (
	"net/http"
	"strconv"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/h3serve"
	"github.com/h3edge/h3edge/edge/upstream"
)

// chain composes the middleware every request passes through, on all three protocols.
// The order is the request's way through the house (DESIGN.md §1), innermost first:
// the origin behind enforce, … out to logAccess; then instrument (package metrics)
// and track, the outermost.
func (s *Server) chain(origin http.Handler) http.Handler {
	h := s.enforce(origin)
	h = s.routeRequest(h)
	h = s.extendedConnect(h)
	h = tooEarly(h)
	h = headerLimit(h)
	h = s.altSvc(h)
	h = s.streamBudget(h) // and shedding (shed.go)
	h = s.logAccess(h)
	return s.track(s.metrics.Instrument(h))
}

// step is a handler of the chain between instrument and the origin. It is given now,
// the instant instrument read for the request — the request's one clock read — so
// that the stream budget, the access log and the policies decide at the same instant
// without reading the clock again or finding it on the ResponseWriter. w is
// instrument's *metrics.Recorder. Steps are closures built once with the chain, so
// passing now costs no allocation.
type step func(w http.ResponseWriter, r *http.Request, now time.Time)

// track counts the requests in flight, so Shutdown knows when HTTP/3 has drained.
func (s *Server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		if r.ProtoMajor >= 2 {
			growStack() // on HTTP/3 mostly grown already (package h3serve): then it finds room
		}
		if r.ProtoMajor == 3 {
			h3serve.Begin(w, r) // lifts the header deadline; a bodiless request gets http.NoBody
		}
		next.ServeHTTP(w, r)
	})
}

// altSvc advertises HTTP/3 on HTTP/1.1 and HTTP/2 responses. The value is the
// configuration's, written by us, so it does not depend on when quic-go registered its
// listener.
func (s *Server) altSvc(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		if r.ProtoMajor < 3 {
			if v := s.altSvcValue.Load(); v != nil && *v != nil {
				w.Header()["Alt-Svc"] = *v
			}
		}
		next(w, r, now)
	}
}

// tooEarly answers 425 to a request that arrived in 0-RTT data unless its method is
// safe: 0-RTT can be replayed by an attacker, so only idempotent reads are accepted.
func tooEarly(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		if r.TLS != nil && !r.TLS.HandshakeComplete {
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
			default:
				answer.Problem(w, r, http.StatusTooEarly, "Too Early",
					"a "+r.Method+" request cannot be sent in 0-RTT data; retry after the handshake")
				return
			}
		}
		next(w, r, now)
	}
}

// headerLimit answers 431 to a request whose header section is larger than
// maxHeaderBytes or has more than maxHeaderFields fields, on every protocol: the
// servers beneath read up to parseMaxHeaderBytes and parseMaxHeaderFields, so the
// answer is a problem document and requests_total counts it. It also answers 400 to a
// method that is not a token, which Go's HTTP/2 server lets through (HTTP/1.1's parser
// and quic-go refuse it): written to an HTTP/1.1 origin, its spaces would make
// another request line.
func headerLimit(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		if !upstream.ValidMethod(r.Method) {
			answer.Problem(w, r, http.StatusBadRequest, "Bad Request", "the request method is not a token (RFC 9110 §9.1)")
			return
		}
		size, fields := headerSize(r)
		if size > maxHeaderBytes {
			answer.Problem(w, r, http.StatusRequestHeaderFieldsTooLarge, "Request Header Fields Too Large",
				"the request's header section is larger than 64 KiB")
			return
		}
		if fields > maxHeaderFields {
			answer.Problem(w, r, http.StatusRequestHeaderFieldsTooLarge, "Request Header Fields Too Large",
				"the request has more than "+strconv.Itoa(maxHeaderFields)+" header fields")
			return
		}
		next(w, r, now)
	}
}

// headerSize is the size of the header section as HTTP/2 and HTTP/3 count it (RFC 9113
// §6.5.2, RFC 9114 §4.2.2): name and value lengths plus 32 per field; and the number of
// its fields but Host (or :authority) and the pseudo-header fields.
func headerSize(r *http.Request) (size, fields int) {
	n := len(r.Method) + len(r.Host) + len(r.RequestURI) + 3*32
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 32
		}
		fields += len(vs)
	}
	return n, fields
}

// growStackBytes is what growStack reserves: more than a request's deepest path
// (QPACK or HPACK, the chain, a decision, the proxy or the demo origin) needs.
const growStackBytes = 16 << 10

// growStack grows the goroutine's stack once, while it is shallow. HTTP/3 and HTTP/2
// run every request on a new goroutine whose small stack would otherwise be doubled,
// and copied frame by frame, deep inside the handler — about a sixth of h3edge's CPU
// per HTTP/3 request (golang/go#18138). Measured with gtlsclient against HTTP/3, one
// connection: +9% requests/s; HTTP/2 (h2load): +2%. HTTP/1.1 serves a connection's
// requests on one goroutine whose stack has grown already, so it skips this. HTTP/3
// calls it where its request goroutine starts (package h3serve, through its Config.Grow), before quic-go parses the
// request: with Go 1.27 that parsing grew the stack too (+8.8% requests/s).
//
// The frame's array is declared in a branch that never runs: the function's prologue
// still checks for the whole frame and grows the stack to hold it, but the array is
// not zeroed on every call (16 KiB each time, twice per HTTP/3 request: 210-240 ns
// against 2.5 ns when the stack has the room, and a new goroutine's first call 1.5-1.9
// µs against 1.3-1.5; BenchmarkGrowStack).
//
//go:noinline
func growStack() {
	if growStackNever {
		var buf [growStackBytes]byte
		touchStack(buf[:]) // the array must exist: an unused one is compiled away
	}
}

// growStackNever is never set: a variable, so that the compiler keeps growStack's
// array (and its frame) that a constant false would remove.
var growStackNever bool

//go:noinline
func touchStack(b []byte) { b[len(b)-1] = 1 }
