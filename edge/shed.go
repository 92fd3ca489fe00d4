package edge

import (
	"context"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/h3edge/h3edge/edge/admission"
	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/overload"
)

// Shedding at capacity (limits.max_inflight_requests) and under overload
// (limits.max_goroutines, the memory limit; package overload). Each refusal is the
// cheapest of its layer: a QUIC connection is refused before it exists, a TCP one reset
// at accept (package admission), a request answered with a prebuilt 503. What the edge
// has admitted is served on.

// applyOverload puts limits' caps in force (at start and on reload).
func (s *Server) applyOverload(l config.LimitsConfig) {
	inflight, goroutines := admission.OverloadCaps(l)
	s.maxInflight.Store(int64(inflight))
	s.shedder.Set(overload.Config{MaxGoroutines: goroutines, Memory: true})
}

// shed answers 503 with Retry-After to a request over max_inflight_requests (track
// counted it in already) or while the edge is overloaded. It costs a request two
// atomic loads and a compare.
func (s *Server) shed(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		if max := s.maxInflight.Load(); max > 0 && s.inflight.Load() > max || s.shedder.Shedding() {
			if r.ProtoMajor < 3 {
				s.tcp.Served(r.Context()) // it brought a request: no longer pending
			}
			answer.Overloaded(w, r)
			return
		}
		next(w, r, now)
	}
}

// shedConns refuses new QUIC connections while the edge is overloaded, before next
// (the guard's budgets) spends anything.
func (s *Server) shedConns(next func(context.Context, *quic.ClientInfo) (context.Context, error)) func(context.Context, *quic.ClientInfo) (context.Context, error) {
	return func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
		if s.shedder.Shedding() {
			return nil, admission.ErrOverload
		}
		return next(ctx, info)
	}
}
