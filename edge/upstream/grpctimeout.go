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

// grpcDeadline is the deadline a gRPC client sent with req (HTTP/2 or HTTP/3,
// application/grpc…), or 0. A server-streaming call's response header comes with its
// first message, which may be long in coming, and a watch's messages may come far
// apart: the client said how long it waits, so where it is longer than the pool's
// timeout or read_timeout it takes their place (Pool.try). A shorter one changes
// nothing: the client gives up itself, and a client's deadline must not eject a target
// that would have answered. It is capped at maxGRPCDeadline.
func grpcDeadline(req *http.Request) time.Duration {
	if req.ProtoMajor < 2 {
		return 0
	}
	v := req.Header["Grpc-Timeout"]
	if len(v) == 0 || !IsGRPC(req.Header["Content-Type"]) {
		return 0
	}
	d, _ := grpcTimeout(v[0])
	return min(d, maxGRPCDeadline)
}

// maxGRPCDeadline caps what a client's deadline may lift the pool's bounds to: any
// client can send grpc-timeout, and a try it holds is not counted for ejection.
const maxGRPCDeadline = time.Hour
