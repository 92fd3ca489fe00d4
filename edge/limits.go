package edge

import (
	"net/http"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/slowbody"
	"github.com/h3edge/h3edge/edge/upstream"
)

// Slow clients (limits:, and a route's own). A body that makes no progress for
// body_read_timeout ends with 408 (package slowbody); a write that makes none for the
// top-level write_timeout closes the connection (h2guard), one past its route's own
// write_timeout ends the response (slowwrite; routeRequest applies both per route).
// Read from the configuration in force for each request or write: reloads apply.

// bodyTimeout serves r with the waits for its body bounded by d, or by the top-level
// limits.body_read_timeout when d is 0.
//
// A gRPC call's body is not watched: it is a stream of messages, and a subscriber
// that sent its one request message and listens, or a client stream that sends a
// small message now and then, makes no progress by this measure while it works as
// meant. Like a WebSocket's, its time is bounded by the route's max_duration and its
// source's share of limits.max_inflight_requests.
func (s *Server) bodyTimeout(w http.ResponseWriter, r *http.Request, now time.Time, next step, d time.Duration) {
	if r.Body == nil || r.Body == http.NoBody || r.ProtoMajor >= 2 && upstream.IsGRPC(r.Header["Content-Type"]) {
		next(w, r, now)
		return
	}
	if d == 0 {
		d = s.config().Limits.BodyReadTimeout
	}
	r, b := slowbody.Watch(w, r, d)
	defer b.Stop()
	next(w, r, now)
	if slowbody.TimedOut(r) { // one rejection, as a write timeout (package h2guard)
		s.reject(r, now)
	}
}

// writeBodyTimeout answers a request whose body made no progress: 408, and on
// HTTP/1.1 the connection is closed after it, as the body was not read to its end
// (HTTP/2 and HTTP/3 have no Connection field: the stream ends).
func writeBodyTimeout(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header()["Connection"] = []string{"close"}
	}
	answer.Problem(w, r, http.StatusRequestTimeout, "Request Timeout",
		"the request body made no progress for body_read_timeout")
}
