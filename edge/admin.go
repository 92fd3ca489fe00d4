package edge

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/limiter/penalty"
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
		Bans:        boxBans{s},
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

// boxBans shows the penalty box to the admin API.
type boxBans struct{ s *Server }

func toAdminBan(b penalty.Ban) admin.Ban {
	return admin.Ban{Prefix: b.Prefix, Until: b.Until, Reason: b.Reason, Strikes: b.Count}
}

func (b boxBans) List(now time.Time) []admin.Ban {
	bans := b.s.box.List(now)
	out := make([]admin.Ban, len(bans))
	for i, ban := range bans {
		out[i] = toAdminBan(ban)
	}
	return out
}

func (b boxBans) Add(_ context.Context, p netip.Prefix, now time.Time, d time.Duration, reason string) (admin.Ban, error) {
	ban := penalty.Ban{Prefix: p, Until: now.Add(d), Reason: reason}
	if err := b.s.box.Add(ban); err != nil {
		return admin.Ban{}, err
	}
	for _, x := range b.s.box.List(now) {
		if x.Prefix == p {
			return toAdminBan(x), nil
		}
	}
	return toAdminBan(ban), nil
}

func (b boxBans) Lift(_ context.Context, p netip.Prefix) (bool, error) {
	lifted := b.s.box.Lift(p)
	b.s.kernelBans.Sync()
	return lifted, nil
}
