package upstream

import (
	"math"
	"net/http"
	"time"
)

// grpcTimeout is the deadline a gRPC client sent with its call, its grpc-timeout field
// (gRPC over HTTP/2: 1 to 8 digits and a unit, H M S m u n), and whether there is a
// valid one. A value too large for a time.Duration is the largest.
func grpcTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var n int64
	for _, c := range []byte(v[:len(v)-1]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > math.MaxInt64/int64(unit) {
		return math.MaxInt64, true
	}
	return time.Duration(n) * unit, true
}

// tryTimeout is how long a try of req waits for the response header: the pool's
// timeout, or a gRPC client's own deadline when it is longer — a server-streaming
// call's header comes with its first message, which may be long in coming, and the
// client said how long it waits. clientDeadline tells the second case, whose passing
// is not the target's failure. A shorter deadline changes nothing: the client gives up
// itself, and a client's deadline must not eject a target that would have answered.
func (p *Pool) tryTimeout(req *http.Request) (d time.Duration, clientDeadline bool) {
	d = p.cfg.Timeout
	if req.ProtoMajor < 2 {
		return d, false
	}
	v := req.Header["Grpc-Timeout"]
	if len(v) == 0 || !IsGRPC(req.Header["Content-Type"]) {
		return d, false
	}
	if g, ok := grpcTimeout(v[0]); ok && g > d {
		return g, true
	}
	return d, false
}
