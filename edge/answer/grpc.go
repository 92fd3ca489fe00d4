package answer

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/h3edge/h3edge/headers"
)

// GRPC status codes (google.golang.org/grpc/codes), for the refusals the edge makes.
const (
	grpcUnknown           = 2
	grpcInvalidArgument   = 3
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcUnavailable       = 14
)

// GRPCStatus is the gRPC status code the edge answers a gRPC client with instead of
// HTTP status: RESOURCE_EXHAUSTED for quota and size refusals (429, 413, 431),
// UNAVAILABLE for what may pass on a retry (503, 502, 425), DEADLINE_EXCEEDED for
// timeouts (504, 408), INVALID_ARGUMENT for a bad request (400), UNIMPLEMENTED for what
// the edge cannot route or serve (404, 501), else UNKNOWN.
func GRPCStatus(status int) int {
	switch status {
	case http.StatusTooManyRequests, http.StatusRequestEntityTooLarge, http.StatusRequestHeaderFieldsTooLarge:
		return grpcResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusTooEarly:
		return grpcUnavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return grpcDeadlineExceeded
	case http.StatusBadRequest:
		return grpcInvalidArgument
	case http.StatusNotFound, http.StatusNotImplemented:
		return grpcUnimplemented
	}
	return grpcUnknown
}

// isGRPC reports whether r is a gRPC call (its content-type is application/grpc, or
// application/grpc+proto and the like).
func isGRPC(r *http.Request) bool {
	v := r.Header[contentType]
	return len(v) > 0 && strings.HasPrefix(v[0], "application/grpc")
}

// writeGRPC answers a gRPC call with a status in the response header (a gRPC
// "Trailers-Only" response: no message follows), HTTP 200 as gRPC requires.
func writeGRPC(w http.ResponseWriter, status int, message string) {
	h := w.Header()
	h[contentType] = grpcType
	h[grpcStatus] = []string{strconv.Itoa(GRPCStatus(status))}
	h[grpcMessage] = []string{headers.GRPCMessage(message)}
	w.WriteHeader(http.StatusOK)
}
