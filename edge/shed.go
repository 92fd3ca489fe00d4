package edge

import (
	"context"
	"net/http"

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

// shedding reports whether a new request is to be shed: over max_inflight_requests
// (track counted it in already) or while the edge is overloaded. Three atomic loads
// and a compare; streamBudget asks it first, so that it costs no step of its own.
func (s *Server) shedding() bool {
	max := s.maxInflight.Load()
	return max > 0 && s.inflight.Load() > max || s.shedder.Shedding()
}

// shed answers a request shedding refused: a prebuilt 503 with Retry-After.
func (s *Server) shed(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor < 3 {
		s.tcp.Served(r.Context()) // it brought a request: no longer pending
	}
	answer.Overloaded(w, r)
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
