package edge

import (
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/h3edge/h3edge/edge/admission"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/metrics"
	"github.com/h3edge/h3edge/edge/upstream"
	"github.com/h3edge/h3edge/limiter/penalty"
	"github.com/h3edge/h3edge/quicconn"
)

// newMetrics registers the edge's metrics (package metrics) on reg, with their hooks
// filled from the server: what is read at scrape time — the current rules, the
// transport guard, the TCP admission, the penalty box, the store's breaker, the
// in-flight count, the pools — and the heavy-hitter sketch instrument feeds.
func (s *Server) newMetrics(reg prometheus.Registerer) (*metrics.Metrics, error) {
	return metrics.New(reg, metrics.Config{
		Rules: s.rules.Load,
		Held:  s.held.Get,
		Transport: func() quicconn.Stats {
			if s.guard == nil {
				return quicconn.Stats{}
			}
			return s.guard.Stats()
		},
		TCPRefused: func() admission.Refused { return s.tcp.Refused() },
		Bans: func() penalty.Stats {
			if s.box == nil {
				return penalty.Stats{}
			}
			return s.box.Stats()
		},
		Breaker:       func() bool { return s.storeBreaker != nil && s.storeBreaker() },
		Inflight:      s.inflight.Load,
		AccessDropped: s.accessDropped.Load,
		Pools:         func() []*upstream.Pool { return s.routing.Load().poolList() },
		Top:           s.top,
		Source:        s.clientPrefix,
	})
}

// clientPrefix is the source prefix r's client is counted under (the top sources, the
// access log): its address, from trusted proxies' fields, cut to the ip: prefix.
func (s *Server) clientPrefix(r *http.Request) netip.Prefix {
	rs := s.rules.Load()
	return rs.SourcePrefix(identity.ClientAddr(r, rs.Trusted))
}
