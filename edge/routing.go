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
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/route"
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
	up      config.Upstream
	trusted []string
	ca      []byte // the CA file's content, so a changed file rebuilds the pool
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
		set := poolSettings{up: up, trusted: cfg.TrustedProxies}
		if up.CA != "" {
			pem, err := os.ReadFile(up.CA)
			if err != nil {
				return nil, fmt.Errorf("edge: upstreams.%s.ca: %w", name, err)
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
		p, err := s.newPool(cfg, name, set, cfg.Upstream != "")
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
		})
	}
	rt.table = route.New(rcs)
	return rt, nil
}

// newPool builds the pool name of cfg. shorthand: the one target of `upstream: URL`,
// whose path is kept and which is never ejected.
func (s *Server) newPool(cfg *config.Config, name string, set poolSettings, shorthand bool) (*upstream.Pool, error) {
	up := set.up
	pc := upstream.Config{
		Name:           name,
		Retries:        *up.Retries,
		Timeout:        up.Timeout,
		MaxConnections: up.MaxConnections,
		Rewrite:        forwarded(cfg.TrustedProxyPrefixes()),
		ErrorHandler:   proxyError,
		OnTry:          s.noteTarget,
		Logger:         s.baseLog,
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
		pc.Health = &upstream.HealthCheck{Path: h.Path, Interval: h.Interval, Timeout: h.Timeout, Unhealthy: h.Unhealthy, Healthy: h.Healthy}
	}
	if set.ca != nil {
		pc.RootCAs = x509.NewCertPool()
		if !pc.RootCAs.AppendCertsFromPEM(set.ca) {
			return nil, fmt.Errorf("edge: upstreams.%s.ca: %s holds no PEM certificate", name, up.CA)
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
// and the origin, which answers 404 to a request no route matches. Without routing
// (the demo origin) it does nothing.
func (s *Server) routeRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt := s.routing.Load()
		if rt == nil {
			next.ServeHTTP(w, r)
			return
		}
		m := rt.table.Match(r)
		if m == nil {
			// The policies that name no route still apply (a client probing for
			// paths is limited like any other); the origin answers 404.
			next.ServeHTTP(w, r)
			return
		}
		if s.rules.Load().ByRoute {
			r = r.WithContext(route.With(r.Context(), m))
		} // else the origin finds the route again: cheaper than a copy of the request
		next.ServeHTTP(w, r)
		if rec, ok := w.(*statusRecorder); ok {
			s.routeStats.count(m.Name, protoIndex(r.ProtoMajor), rec.code)
		}
	})
}

// routeStats counts the responses of each route by protocol and status code, for
// route_requests_total. Route names come from the configuration only, so the set is
// bounded by what the configurations in force have named.
type routeStats struct {
	byName sync.Map // route name → *routeCounts
}

type routeCounts [numProtos][numCodes]atomic.Uint64

func (rs *routeStats) count(name string, proto, code int) {
	if code == 0 {
		code = http.StatusOK
	}
	if code < minCode || code > maxCode {
		return // net/http allows up to 999; requests_total has those
	}
	c, ok := rs.byName.Load(name)
	if !ok {
		c, _ = rs.byName.LoadOrStore(name, new(routeCounts))
	}
	c.(*routeCounts)[proto][code-minCode].Add(1)
}

// routeOf returns the name of the route r took, "" if none.
func routeOf(r *http.Request) string {
	if m := route.FromContext(r.Context()); m != nil {
		return m.Name
	}
	return ""
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

// upstreamCollector exposes the pools' metrics (DESIGN.md §9) at scrape time.
type upstreamCollector struct {
	s                                         *Server
	requests, duration, healthy, retr, routed *prometheus.Desc
}

func newUpstreamCollector(s *Server) *upstreamCollector {
	name := func(n string) string { return prometheus.BuildFQName(metricsNamespace, "", n) }
	return &upstreamCollector{
		s: s,
		requests: prometheus.NewDesc(name("upstream_requests_total"),
			`Tries sent to each target, by the status code of its response ("error": none came: connect error, reset, timeout).`,
			[]string{"upstream", "target", "code"}, nil),
		duration: prometheus.NewDesc(name("upstream_duration_seconds"),
			"Time from sending a try to its response header.", []string{"upstream"}, nil),
		healthy: prometheus.NewDesc(name("upstream_healthy"),
			"1 while a target is in rotation, 0 while it is ejected or failing its health checks.",
			[]string{"upstream", "target"}, nil),
		retr: prometheus.NewDesc(name("upstream_retries_total"),
			"Tries after a request's first, on another target.", []string{"upstream"}, nil),
		routed: prometheus.NewDesc(name("route_requests_total"),
			"Requests answered, by the route that took them (names from the configuration), protocol and status code; requests no route took are in requests_total only.",
			[]string{"route", "proto", "code"}, nil),
	}
}

func (c *upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.duration
	ch <- c.healthy
	ch <- c.retr
	ch <- c.routed
}

func (c *upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.routeStats.byName.Range(func(k, v any) bool {
		counts := v.(*routeCounts)
		for p := range counts {
			for i := range counts[p] {
				if n := counts[p][i].Load(); n > 0 {
					ch <- prometheus.MustNewConstMetric(c.routed, prometheus.CounterValue, float64(n), k.(string), protoNames[p], codeNames[i])
				}
			}
		}
		return true
	})
	for _, p := range c.s.routing.Load().poolList() {
		st := p.Stats()
		ch <- prometheus.MustNewConstMetric(c.retr, prometheus.CounterValue, float64(st.Retries), st.Name)
		buckets := make(map[float64]uint64, len(upstream.DurationBuckets))
		var n uint64
		for i, v := range st.Duration {
			n += v
			if i < len(upstream.DurationBuckets) {
				buckets[upstream.DurationBuckets[i]] = n
			}
		}
		ch <- prometheus.MustNewConstHistogram(c.duration, n, st.DurationSum.Seconds(), buckets, st.Name)
		for _, t := range st.Targets {
			h := 0.0
			if t.Healthy {
				h = 1
			}
			ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, h, st.Name, t.URL)
			for code, v := range t.Codes {
				ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(v), st.Name, t.URL, strconv.Itoa(code))
			}
			if t.Errors > 0 {
				ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(t.Errors), st.Name, t.URL, "error")
			}
		}
	}
}

// upstreamsHandler serves GET /api/v1/upstreams: each pool's targets with their state,
// requests in flight and recent p99.
func (s *Server) upstreamsHandler() http.Handler {
	return upstream.StatusHandler(func() []*upstream.Pool { return s.routing.Load().poolList() })
}
