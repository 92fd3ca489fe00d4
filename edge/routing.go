package edge

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/metrics"
	"github.com/h3edge/h3edge/edge/route"
	"github.com/h3edge/h3edge/edge/slowwrite"
	"github.com/h3edge/h3edge/edge/upstream"
)

// routing is the origin when upstreams (or the upstream shorthand) are configured:
// the route table and the pools its routes send to. It is immutable; a reload builds
// a new one, carrying over the pools whose settings did not change.
type routing struct {
	s     *Server
	table *route.Table
	pools map[string]*upstream.Pool
	// settings are what each pool was built from, to tell on reload whether it changed.
	settings map[string]poolSettings
	names    []string // pool names, sorted
}

// poolSettings is what a pool is built from.
type poolSettings struct {
	up config.Upstream
	ca []byte // the CA file's content, so a changed file rebuilds the pool
}

// newRouting builds the routes and pools of cfg. Pools of prev whose settings are
// unchanged are reused; the others are new, and prev.retire closes the ones left.
func (s *Server) newRouting(cfg *config.Config, prev *routing) (*routing, error) {
	rt := &routing{s: s, pools: map[string]*upstream.Pool{}, settings: map[string]poolSettings{}}
	ups, routes := cfg.Upstreams, cfg.Routes
	if cfg.Upstream != "" {
		// The shorthand: one pool, one target (its path kept), one route for all; no
		// retries and no ejection, so a lone origin's errors reach the client as before.
		one := 0
		ups = map[string]config.Upstream{config.ShorthandName: {
			Targets: []string{cfg.Upstream}, Balance: "round_robin", Retries: &one,
			Timeout: cfg.UpstreamTimeout,
		}}
		routes = []config.Route{{Name: config.ShorthandName, Upstream: config.ShorthandName}}
	}
	for name, up := range ups {
		set := poolSettings{up: up}
		if up.CA != "" {
			pem, err := os.ReadFile(up.CA)
			if err != nil {
				rt.closeNew(prev)
				return nil, cfg.Problem("upstreams."+name+".ca", fmt.Errorf("%w; give a readable PEM file", err))
			}
			set.ca = pem
		}
		if prev != nil {
			if old, ok := prev.pools[name]; ok && reflect.DeepEqual(prev.settings[name], set) {
				rt.pools[name], rt.settings[name] = old, set
				rt.names = append(rt.names, name)
				continue
			}
		}
		var inherit *upstream.Pool // a changed pool of the same name: its targets' state carries over
		if prev != nil {
			inherit = prev.pools[name]
		}
		p, err := s.newPool(cfg, name, set, inherit, cfg.Upstream != "")
		if err != nil {
			rt.closeNew(prev)
			return nil, err
		}
		rt.pools[name], rt.settings[name] = p, set
		rt.names = append(rt.names, name)
	}
	slices.Sort(rt.names)
	var rcs []route.Config
	for _, r := range routes {
		p := rt.pools[r.Upstream]
		if p == nil {
			rt.closeNew(prev)
			return nil, fmt.Errorf("edge: route %s: unknown upstream %q", r.Name, r.Upstream)
		}
		rcs = append(rcs, route.Config{
			Name: r.Name, Upstream: r.Upstream, Host: r.Match.Host, PathPrefix: r.Match.PathPrefix,
			Methods: r.Match.Methods, Headers: r.Match.Headers, StripPrefix: r.StripPrefix,
			MaxBody: int64(r.MaxBody), MaxDuration: r.MaxDuration, Handler: p,
			BodyReadTimeout: r.Limits.BodyReadTimeout, WriteTimeout: r.Limits.WriteTimeout,
		})
	}
	rt.table = route.New(rcs)
	return rt, nil
}

// newPool builds the pool name of cfg. shorthand: the one target of `upstream: URL`,
// whose path is kept and which is never ejected.
func (s *Server) newPool(cfg *config.Config, name string, set poolSettings, inherit *upstream.Pool, shorthand bool) (*upstream.Pool, error) {
	up := set.up
	pc := upstream.Config{
		Name:           name,
		Retries:        *up.Retries,
		Timeout:        up.Timeout,
		ReadTimeout:    up.ReadTimeout,
		MaxConnections: up.MaxConnections,
		Rewrite:        forwarded(s.trustedPrefixes),
		ErrorHandler:   proxyError,
		OnTry:          s.noteTarget,
		Logger:         s.baseLog,
		Inherit:        inherit,
	}
	pc.Balance, _ = upstream.ParseBalance(up.Balance)
	for i, t := range up.Targets {
		var tg upstream.Target
		if shorthand {
			u, err := url.Parse(t)
			if err != nil {
				return nil, fmt.Errorf("edge: upstream: %w", err)
			}
			tg = upstream.Target{URL: u, Weight: 1}
		} else {
			ct, err := config.ParseTarget(t)
			if err != nil {
				return nil, fmt.Errorf("edge: upstreams.%s.targets[%d]: %w", name, i, err)
			}
			tg = upstream.Target{URL: ct.URL, Weight: ct.Weight}
		}
		pc.Targets = append(pc.Targets, tg)
	}
	if !shorthand {
		pc.Passive = upstream.Passive{Failures: up.Passive.Failures, Within: up.Passive.Within, Eject: up.Passive.Eject}
	}
	if h := up.Health; h != nil {
		pc.Health = &upstream.HealthCheck{Path: h.Path, GRPC: h.Protocol == "grpc", Service: h.Service,
			Interval: h.Interval, Timeout: h.Timeout, Unhealthy: h.Unhealthy, Healthy: h.Healthy}
	}
	if set.ca != nil {
		pc.RootCAs = x509.NewCertPool()
		if !pc.RootCAs.AppendCertsFromPEM(set.ca) {
			return nil, cfg.Problem("upstreams."+name+".ca", fmt.Errorf("%s holds no PEM certificate; give a file of CA certificates in PEM", up.CA))
		}
	}
	return upstream.New(pc)
}

// closeNew closes the pools of rt that prev does not have: a build that failed half way.
func (rt *routing) closeNew(prev *routing) {
	for name, p := range rt.pools {
		if prev == nil || prev.pools[name] != p {
			p.Close()
		}
	}
}

// retire closes the pools of rt that next does not use: their health checks stop and
// their connections close once the requests in flight on them are done.
func (rt *routing) retire(next *routing) {
	if rt == nil {
		return
	}
	for name, p := range rt.pools {
		if next == nil || next.pools[name] != p {
			p.Close()
		}
	}
}

// poolList returns the pools, sorted by name.
func (rt *routing) poolList() []*upstream.Pool {
	if rt == nil {
		return nil
	}
	ps := make([]*upstream.Pool, len(rt.names))
	for i, n := range rt.names {
		ps[i] = rt.pools[n]
	}
	return ps
}

// ServeHTTP sends r to its route's pool (routeRequest chose the route, before the
// policies, which match routes by name).
func (rt *routing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := route.FromContext(r.Context())
	if m == nil {
		if m = rt.table.Match(r); m == nil {
			writeNoRoute(w, r)
			return
		}
	}
	if f := rt.s.accessFields(r); f != nil {
		f.Route, f.Upstream = m.Name, m.Upstream
	}
	if p, ok := m.Handler.(*upstream.Pool); ok && p.Balance() == upstream.Hash {
		r = r.WithContext(upstream.WithClientKey(r.Context(), rt.s.hashKey(r)))
	}
	m.Serve(w, r, writeBodyTooLarge)
}

// noteTarget names the target of a request's try in its access-log line: the last
// try's, the one that answered.
func (s *Server) noteTarget(r *http.Request, target string) {
	if f := s.accessFields(r); f != nil {
		f.Target = target
	}
}

// hashKey is the client key a hash pool keeps on one target: the request's first
// credential of the policies' key chains (API key, bearer token…), else its client
// address.
func (s *Server) hashKey(r *http.Request) string {
	rs := s.rules.Load()
	for _, ks := range rs.Credential {
		if v, ok := ks.Value(r); ok {
			return "key:" + v
		}
	}
	return "ip:" + identity.ClientAddr(r, rs.Trusted).String()
}

// routeRequest chooses the request's route, for the policies (match: {route: NAME})
// and the origin, which answers 404 to a request no route matches, and applies the
// route's limits: its body_read_timeout (or the top level's) to the waits for the
// request body and its own write_timeout, if any, to the writes of the response. Without
// routing (the demo origin) or without a route, the top-level body_read_timeout applies.
// It runs after extendedConnect, so the stream of a WebSocket is not a body it bounds.
func (s *Server) routeRequest(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		rt := s.routing.Load()
		var m *route.Route
		if rt != nil {
			m = rt.table.Match(r)
		}
		if m == nil {
			// The policies that name no route still apply (a client probing for
			// paths is limited like any other); the origin answers 404.
			s.bodyTimeout(w, r, now, next, 0)
			return
		}
		if s.rules.Load().ByRoute {
			r = r.WithContext(route.With(r.Context(), m))
		} // else the origin finds the route again: cheaper than a copy of the request
		if d := m.WriteTimeout(); d > 0 {
			sw := slowwrite.Watch(w, d)
			defer sw.Stop()
			w = sw
		}
		s.bodyTimeout(w, r, now, next, m.BodyReadTimeout())
		if rec := metrics.RecorderOf(w); rec != nil {
			s.metrics.CountRoute(m.Name, r.ProtoMajor, rec.Status())
		}
	}
}

func writeNoRoute(w http.ResponseWriter, r *http.Request) {
	answer.Problem(w, r, http.StatusNotFound, "Not Found", "no route matches this request")
}

func writeBodyTooLarge(w http.ResponseWriter, r *http.Request, m *route.Route) {
	if r.ProtoMajor == 1 {
		w.Header()["Connection"] = []string{"close"} // the rest of the body is not read
	}
	answer.Problem(w, r, http.StatusRequestEntityTooLarge, "Content Too Large",
		"the request body is larger than "+strconv.FormatInt(m.MaxBody(), 10)+" bytes, the limit of route "+m.Name)
}

// writeNoHealthy answers a request whose pool has no healthy target: 503 with
// Retry-After, at once.
func writeNoHealthy(w http.ResponseWriter, r *http.Request, e *upstream.NoHealthyError) {
	answer.Unavailable(w, r, e.RetryAfter, "no healthy target in this route's upstream")
}

// upstreamsHandler serves GET /api/v1/upstreams: each pool's targets with their state,
// requests in flight and recent p99.
func (s *Server) upstreamsHandler() http.Handler {
	return upstream.StatusHandler(func() []*upstream.Pool { return s.routing.Load().poolList() })
}
