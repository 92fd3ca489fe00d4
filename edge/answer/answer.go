// Package answer writes every refusal the edge makes itself: a problem document
// (RFC 9457, application/problem+json) with Cache-Control: no-store and, where the
// client may come back, one Retry-After rounding (headers.RetryAfter, then whole
// seconds up). To a gRPC client (content-type application/grpc…) the same refusal is
// a gRPC status instead (DESIGN §9): HTTP 200 with grpc-status and grpc-message, the
// fields already set (RateLimit, Retry-After) kept.
//
// Nothing here decides: callers say what to refuse and why.
package answer

import (
	"net/http"
	"time"

	"github.com/h3edge/h3edge/headers"
)

// Field names as they index an http.Header (canonical).
const (
	contentType  = "Content-Type"
	cacheControl = "Cache-Control"
	grpcStatus   = "Grpc-Status"
	grpcMessage  = "Grpc-Message"
)

var (
	problemType = []string{headers.ProblemContentType}
	noStore     = []string{"no-store"}
	grpcType    = []string{"application/grpc"}
	oneSecond   = []string{"1"}
)

// Problem answers status with an "about:blank" problem document titled title.
func Problem(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	if isGRPC(r) {
		writeGRPC(w, status, detail)
		return
	}
	write(w, status, headers.AppendProblem(nil, "about:blank", title, status, detail))
}

// QuotaExceeded answers 429 for a request the policies named in violated refused:
// Retry-After is headers.RetryAfter(denying, retry), so never earlier than a denying
// policy's t and at least a second, and the document is the draft's quota-exceeded.
func QuotaExceeded(w http.ResponseWriter, r *http.Request, denying []headers.Limit, retry time.Duration, detail string, violated []string) {
	retry = headers.RetryAfter(denying, retry)
	w.Header()[headers.RetryAfterFieldName] = []string{string(headers.AppendRetryAfter(nil, retry))}
	if isGRPC(r) {
		writeGRPC(w, http.StatusTooManyRequests, detail)
		return
	}
	write(w, http.StatusTooManyRequests, headers.AppendQuotaExceeded(nil, detail, violated))
}

// ReducedCapacity answers 503 #temporary-reduced-capacity for a request whose policies
// (named) failed closed: their store cannot decide. A second later it may again.
func ReducedCapacity(w http.ResponseWriter, r *http.Request, detail string, policies []string) {
	w.Header()[headers.RetryAfterFieldName] = oneSecond
	if isGRPC(r) {
		writeGRPC(w, http.StatusServiceUnavailable, detail)
		return
	}
	write(w, http.StatusServiceUnavailable, headers.AppendTemporaryReducedCapacity(nil, detail, policies))
}

// Unavailable answers 503 with Retry-After retry, at least a second: what the edge
// needs (a healthy target of a route's pool) may be back by then.
func Unavailable(w http.ResponseWriter, r *http.Request, retry time.Duration, detail string) {
	w.Header()[headers.RetryAfterFieldName] = []string{string(headers.AppendRetryAfter(nil, max(retry, time.Second)))}
	Problem(w, r, http.StatusServiceUnavailable, "Service Unavailable", detail)
}

// tooManyStreams is the prebuilt answer to a request over its source's stream budget:
// nothing in it is computed per request.
var tooManyStreams = []byte(`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests from this source"}`)

// TooManyStreams answers 429 to a request over its source's stream budget (ip.streams)
// with a prebuilt document and Retry-After: 1: that refusal is the cheapest the edge
// makes over HTTP/1.1 and HTTP/2, and builds no fields.
func TooManyStreams(w http.ResponseWriter, r *http.Request) {
	prebuilt(w, r, http.StatusTooManyRequests, "too many requests from this source", tooManyStreams)
}

// overloaded is the prebuilt answer to a request the edge sheds (limits:
// max_inflight_requests, or overload: memory or goroutines over their bounds).
var overloaded = []byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the edge is at capacity; retry shortly"}`)

// Overloaded answers 503 with Retry-After: 1 and a prebuilt document to a request
// the edge sheds: at capacity, it builds nothing per request.
func Overloaded(w http.ResponseWriter, r *http.Request) {
	prebuilt(w, r, http.StatusServiceUnavailable, "the edge is at capacity; retry shortly", overloaded)
}

// prebuilt writes a prebuilt refusal, body (detail in it), with Retry-After: 1, or
// its gRPC status to a gRPC client.
func prebuilt(w http.ResponseWriter, r *http.Request, status int, detail string, body []byte) {
	w.Header()[headers.RetryAfterFieldName] = oneSecond
	if isGRPC(r) {
		writeGRPC(w, status, detail)
		return
	}
	write(w, status, body)
}

func write(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h[contentType] = problemType
	h[cacheControl] = noStore
	w.WriteHeader(status)
	w.Write(body)
}
