package edge

import (
	"net/http"

	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/bans"
)

// adminHandler is the admin API of s (package admin) with its hooks filled from the
// server: the configuration in force, reload, readiness, the penalty box, the
// heavy-hitter sketches, and the registry the edge's metrics are on. Listen serves it
// on the admin listener.
func (s *Server) adminHandler() http.Handler {
	return &admin.Handler{
		Config:      s.config,
		Reload:      s.reloadConfig,
		Ready:       s.readiness,
		Bans:        bans.Admin{Box: s.box, Kernel: s.kernelBans},
		Top:         s.top,
		Gatherer:    s.registry,
		Connections: func() int { return s.guard.Stats().Open },
		Extra: map[string]http.Handler{
			"GET /api/v1/certificates": http.HandlerFunc(s.serveCertificates), // acme.go
			"GET /api/v1/upstreams":    s.upstreamsHandler(),                  // routing.go
		},
		Logger: s.log,
	}
}

// readiness is what /readyz reports: the public sockets bound and not shutting down,
// and whether the store decides.
func (s *Server) readiness() admin.Readiness {
	rd := admin.Readiness{Listeners: "up", Store: "local"}
	s.mu.Lock()
	shutting := s.shutdown
	s.mu.Unlock()
	switch {
	case shutting:
		rd.Listeners = "shutting_down"
	case s.altSvcValue.Load() == nil: // set by Listen once both sockets are bound
		rd.Listeners = "down"
	}
	if s.storeBreaker != nil {
		rd.Store = "ok"
		if s.storeBreaker() {
			rd.Store = "breaker_open"
		}
	}
	rd.Certificates = s.acmeReadiness()
	return rd
}
