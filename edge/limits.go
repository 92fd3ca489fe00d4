package edge

import (
	"net/http"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/slowbody"
)

// Slow clients (limits:). A request body that makes no progress for
// limits.body_read_timeout while the edge waits for it ends with 408 (package
// slowbody); a write to an HTTP/1.1 or HTTP/2 connection that makes no progress for
// limits.write_timeout closes the connection (package h2guard). Both are read from
// the configuration in force for each request or write, so a reload applies them.

// bodyTimeout bounds the waits for a request's body by limits.body_read_timeout.
func (s *Server) bodyTimeout(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		r, b := slowbody.Watch(w, r, s.config().Limits.BodyReadTimeout)
		defer b.Stop()
		next(w, r, now)
	}
}

// bodyTimedOut reports whether r's body read ended at body_read_timeout.
func bodyTimedOut(r *http.Request) bool { return slowbody.TimedOut(r) }

// writeBodyTimeout answers a request whose body made no progress: 408, and on
// HTTP/1.1 the connection is closed after it, as the body was not read to its end
// (HTTP/2 and HTTP/3 have no Connection field: the stream ends).
func writeBodyTimeout(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header()["Connection"] = []string{"close"}
	}
	answer.Problem(w, r, http.StatusRequestTimeout, "Request Timeout",
		"the request body made no progress for limits.body_read_timeout")
}

// writeTimeout returns limits.write_timeout in force.
func (s *Server) writeTimeout() time.Duration { return s.config().Limits.WriteTimeout }
