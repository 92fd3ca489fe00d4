// Package route is h3edge's route table (DESIGN.md §9): routes matched in order by
// host (exact or "*." wildcard), path prefix, methods and header values, each sending
// what it matches to a handler with its own limits (strip_prefix, max_body,
// max_duration, and the timeouts the edge applies: body_read_timeout, write_timeout).
package route

import (
	"context"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"time"
)

// Route is one compiled route. Build it with a Config through New; it is immutable.
type Route struct {
	// Name names the route in metrics, logs and policy matches.
	Name string
	// Upstream is the name of the pool the route sends to (for logs and metrics).
	Upstream string
	// Handler serves the requests the route matches.
	Handler http.Handler

	host        string // lower case; "" any
	wildcard    bool   // host is ".example.com": any name below it
	pathPrefix  string
	methods     []string
	headers     []header // canonical names
	stripPrefix string
	maxBody     int64
	maxDuration time.Duration
	bodyRead    time.Duration
	write       time.Duration
}

type header struct{ name, value string }

// Config describes one route, as the configuration's routes[] entry does.
type Config struct {
	Name, Upstream string
	Host           string // exact, or "*.example.com"
	PathPrefix     string
	Methods        []string
	Headers        map[string]string
	StripPrefix    string
	MaxBody        int64         // 0: no bound
	MaxDuration    time.Duration // 0: no bound
	// BodyReadTimeout and WriteTimeout are the route's own limits (0: the top
	// level's). The edge applies them; Serve does not.
	BodyReadTimeout, WriteTimeout time.Duration
	Handler                       http.Handler
}

// Table is an ordered list of routes; the first that matches a request wins.
type Table struct {
	routes []*Route
}

// New compiles the routes, in order.
func New(cfgs []Config) *Table {
	t := &Table{}
	for _, c := range cfgs {
		r := &Route{
			Name: c.Name, Upstream: c.Upstream, Handler: c.Handler,
			host: strings.ToLower(c.Host), pathPrefix: c.PathPrefix, methods: c.Methods,
			stripPrefix: c.StripPrefix, maxBody: c.MaxBody, maxDuration: c.MaxDuration,
			bodyRead: c.BodyReadTimeout, write: c.WriteTimeout,
		}
		if rest, ok := strings.CutPrefix(r.host, "*"); ok {
			r.host, r.wildcard = rest, true
		}
		for name, v := range c.Headers {
			r.headers = append(r.headers, header{textproto.CanonicalMIMEHeaderKey(name), v})
		}
		slices.SortFunc(r.headers, func(a, b header) int { return strings.Compare(a.name, b.name) })
		t.routes = append(t.routes, r)
	}
	return t
}

// Routes returns the routes in order. The slice is shared; do not modify it.
func (t *Table) Routes() []*Route { return t.routes }

// Match returns the first route that matches r, or nil.
func (t *Table) Match(r *http.Request) *Route {
	host := hostOnly(r.Host)
	for _, rt := range t.routes {
		if rt.matches(r, host) {
			return rt
		}
	}
	return nil
}

func (rt *Route) matches(r *http.Request, host string) bool {
	switch {
	case rt.host == "":
	case rt.wildcard:
		// ".example.com" matches "a.example.com", not "example.com".
		if len(host) <= len(rt.host) || !strings.HasSuffix(host, rt.host) {
			return false
		}
	case host != rt.host:
		return false
	}
	if !strings.HasPrefix(r.URL.Path, rt.pathPrefix) {
		return false
	}
	if len(rt.methods) > 0 && !slices.Contains(rt.methods, r.Method) {
		return false
	}
	for _, h := range rt.headers {
		if !slices.Contains(r.Header[h.name], h.value) {
			return false
		}
	}
	return true
}

// hostOnly is the request's host name in lower case, without port (brackets of an
// IPv6 literal kept, as a configured host would have them).
func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

type routeKey struct{}

// With returns a context that carries rt as the request's route.
func With(ctx context.Context, rt *Route) context.Context {
	return context.WithValue(ctx, routeKey{}, rt)
}

// FromContext returns the route With stored, or nil.
func FromContext(ctx context.Context) *Route {
	rt, _ := ctx.Value(routeKey{}).(*Route)
	return rt
}
