package config

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Upstream is one pool of targets (DESIGN.md §9), named by its key under upstreams:.
type Upstream struct {
	// Targets are the pool's base URLs: http://, https:// or h2c:// (HTTP/2 without
	// TLS, for gRPC), host and port only, no path; "#w=3" gives a target weight 3
	// (default 1, at most 1000). At least one, at most 64.
	Targets []string `yaml:"targets"`
	// Balance is round_robin, least_requests (two random choices) or hash (by client
	// key: one client sticks to one target). If empty, round_robin is used.
	Balance string `yaml:"balance"`
	// Health configures active checks. If nil, targets are checked passively only.
	Health *HealthCheck `yaml:"health"`
	// Passive configures outlier ejection from real requests' outcomes.
	Passive Passive `yaml:"passive"`
	// Retries bounds how many times a request is tried again on another target
	// (idempotent requests, and any request that never reached a target), under the
	// pool's retry budget. If nil, 1 is used; 0 disables retries; at most 5.
	Retries *int `yaml:"retries"`
	// Timeout bounds the wait for a target's response header (queueing for a
	// connection and dialling included); then 504. If zero, 30s is used; at most 10m.
	Timeout time.Duration `yaml:"timeout"`
	// ReadTimeout bounds each wait for the next bytes of a response body once its
	// header has come (a gRPC client's longer deadline in its place); past it the
	// response is cut off. If zero, 5m is used; at most 720h.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// MaxConnections caps the connections to each target; requests over it wait for
	// one, up to Timeout. If zero, 1024 is used; at most 1000000.
	MaxConnections int `yaml:"max_connections"`
	// CA is a PEM file of the roots https:// targets are verified against. If empty,
	// the system roots are used.
	CA string `yaml:"ca"`
}

// HealthCheck is a pool's active health check: a GET of Path on every target every
// Interval (jittered by ±10 % so a fleet does not probe in step), or gRPC's health
// protocol (grpc.health.v1.Health/Check) with Protocol grpc.
type HealthCheck struct {
	// Protocol is http or grpc. If empty, http is used.
	Protocol string `yaml:"protocol"`
	// Path is the request path of an http check; a 2xx or 3xx answer is a success.
	// If empty, "/healthz" is used. Not with grpc.
	Path string `yaml:"path"`
	// Service is the service a grpc check asks about; empty: the server as a whole.
	// Only with grpc.
	Service string `yaml:"service"`
	// Interval is the time between checks of one target. If zero, 5s is used;
	// from 50ms to 1h.
	Interval time.Duration `yaml:"interval"`
	// Timeout bounds one check. If zero, 1s is used; at most Interval.
	Timeout time.Duration `yaml:"timeout"`
	// Unhealthy is how many failed checks in a row take a target out. If zero, 3 is
	// used; at most 100.
	Unhealthy int `yaml:"unhealthy"`
	// Healthy is how many successful checks in a row bring it back. If zero, 2 is
	// used; at most 100.
	Healthy int `yaml:"healthy"`
}

// Passive is outlier ejection: Failures (connect errors, timeouts, 5xx) within Within
// eject a target for Eject; then one successful request or check brings it back.
type Passive struct {
	// Failures within Within eject a target. If zero, 5 is used; at most 10000.
	Failures int `yaml:"failures"`
	// Within is the counting period. If zero, 10s is used; at most 1h.
	Within time.Duration `yaml:"within"`
	// Eject is how long an ejected target gets no requests. If zero, 30s is used;
	// at most 1h.
	Eject time.Duration `yaml:"eject"`
}

// Route sends the requests it matches to an upstream (DESIGN.md §9). Routes are
// matched in order; the first that matches wins.
type Route struct {
	// Name names the route in metrics, logs and policy matches (match: {route: NAME}).
	// Required, unique, printable ASCII without '"' or '\'.
	Name string `yaml:"name"`
	// Match selects the requests; all fields given must hold. If empty, all requests.
	Match RouteMatch `yaml:"match"`
	// Upstream names the pool under upstreams: the requests go to. Required.
	Upstream string `yaml:"upstream"`
	// StripPrefix is removed from the start of the path before it is sent upstream.
	// It starts with "/". If empty, the path is sent as it came.
	StripPrefix string `yaml:"strip_prefix"`
	// MaxBody bounds the request body, such as 10MiB: a larger Content-Length gets 413
	// before the upstream sees a byte, a streamed body is cut with 413 once it passes
	// it. If zero, bodies are not bounded.
	MaxBody Size `yaml:"max_body"`
	// MaxDuration ends a request (WebSocket, SSE and gRPC streams included) this long
	// after it began. If zero, requests are not bounded; at most 720h.
	MaxDuration time.Duration `yaml:"max_duration"`
	// Limits are the route's own body_read_timeout and write_timeout; a zero one is
	// the top level's (limits:). A route's write_timeout bounds each write of its
	// responses on HTTP/1.1, HTTP/2 and HTTP/3 alike (the stream is reset, or the
	// HTTP/1.1 connection closed); it is at most the top level's, which still bounds
	// every HTTP/1.1 and HTTP/2 connection as a whole. max_connections,
	// max_pending_connections, max_inflight_requests and max_goroutines are the whole
	// edge's: top level only.
	Limits LimitsConfig `yaml:"limits"`
}

// RouteMatch selects the requests of a route. Empty fields match everything.
type RouteMatch struct {
	// Host matches the request's host name exactly, or with a leading "*." any name
	// below it (*.example.com matches a.example.com, not example.com).
	Host string `yaml:"host"`
	// PathPrefix matches request paths starting with it; it starts with "/".
	PathPrefix string `yaml:"path_prefix"`
	// Methods are upper-case request methods such as GET.
	Methods []string `yaml:"methods"`
	// Headers are fields the request must carry with exactly these values.
	Headers map[string]string `yaml:"headers"`
}

// Size is a number of bytes, written as 1024, 64KiB, 10MiB, 1GiB (or kB, MB, GB, in
// powers of ten).
type Size int64

// UnmarshalYAML reads a size written as ParseSize takes it.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("not a size")
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// sizeUnits are the suffixes ParseSize takes, longest first.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseSize reads a whole, non-negative number of bytes with an optional unit:
// "1024", "64KiB", "10MiB", "1GB". It refuses fractions, signs, spaces and values
// beyond 2^62.
func ParseSize(s string) (Size, error) {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = s[:len(s)-len(u.suffix)], u.mult
			break
		}
	}
	if !isDigits(num) || len(num) > 19 {
		return 0, fmt.Errorf("%q is not a size such as 65536, 64KiB or 10MiB", clip(s))
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is larger than 4 EiB", clip(s))
	}
	return Size(n * mult), nil
}

// Target is one parsed entry of Upstream.Targets.
type Target struct {
	URL    *url.URL // scheme http, https or h2c; host:port; no path
	Weight int      // 1 to 1000
}

// maxWeight bounds a target's weight.
const maxWeight = 1000

// ParseTarget reads a target URL with an optional weight fragment, "h2c://10.0.0.1:9000#w=3".
// The URL must be absolute with scheme http, https or h2c, a host, and no user, path
// (but "/"), query or fragment other than the weight.
func ParseTarget(s string) (Target, error) {
	base, frag, hasFrag := strings.Cut(s, "#")
	t := Target{Weight: 1}
	if hasFrag {
		w, ok := strings.CutPrefix(frag, "w=")
		n, err := strconv.Atoi(w)
		if !ok || !isDigits(w) || err != nil || n < 1 || n > maxWeight {
			return t, fmt.Errorf("the weight must be #w=N with N from 1 to %d (got #%s)", maxWeight, clip(frag))
		}
		t.Weight = n
	}
	u, err := url.Parse(base)
	if err != nil || !slices.Contains(targetSchemes, u.Scheme) || u.Host == "" || u.Opaque != "" {
		return t, fmt.Errorf("must be an absolute %s URL such as http://10.0.0.1:9000 (got %q)", oneOf(targetSchemes), clip(s))
	}
	if u.User != nil {
		return t, fmt.Errorf("must not carry a user or password (got %q)", clip(u.Redacted()))
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.ForceQuery {
		return t, fmt.Errorf("must be scheme://host:port only: a target has no path or query; use a route's strip_prefix, or put the path in the request (got %q)", clip(s))
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return t, fmt.Errorf("port %q must be from 1 to 65535", clip(port))
		}
	}
	u.Path = ""
	t.URL = u
	return t, nil
}

// The enumerations of DESIGN.md §9.
const (
	balanceRoundRobin = "round_robin"
	// DefaultRetries is Upstream.Retries when it is not set.
	DefaultRetries = 1
	// DefaultReadTimeout is Upstream.ReadTimeout when it is not set: Envoy's stream
	// idle timeout, long enough for the heartbeats of SSE and gRPC watches.
	DefaultReadTimeout = 5 * time.Minute
)

var (
	balances      = []string{balanceRoundRobin, "least_requests", "hash"}
	targetSchemes = []string{"http", "https", "h2c"}
)

// ShorthandName is the name of the pool and of the route that the shorthand
// `upstream: URL` stands for.
const ShorthandName = "default"

// defaultRoutes fills the defaults of upstreams: and routes:.
func (c *Config) defaultRoutes() {
	for name, u := range c.Upstreams {
		u.Balance = cmp.Or(u.Balance, balanceRoundRobin)
		if u.Retries == nil {
			r := DefaultRetries
			u.Retries = &r
		}
		u.Timeout = cmp.Or(u.Timeout, defaultUpstreamTimeout)
		u.ReadTimeout = cmp.Or(u.ReadTimeout, DefaultReadTimeout)
		u.MaxConnections = cmp.Or(u.MaxConnections, 1024)
		if h := u.Health; h != nil {
			h.Protocol = cmp.Or(h.Protocol, "http")
			if h.Protocol == "http" {
				h.Path = cmp.Or(h.Path, "/healthz")
			}
			h.Interval = cmp.Or(h.Interval, 5*time.Second)
			h.Timeout = cmp.Or(h.Timeout, time.Second)
			h.Unhealthy = cmp.Or(h.Unhealthy, 3)
			h.Healthy = cmp.Or(h.Healthy, 2)
		}
		p := &u.Passive
		p.Failures = cmp.Or(p.Failures, 5)
		p.Within = cmp.Or(p.Within, 10*time.Second)
		p.Eject = cmp.Or(p.Eject, 30*time.Second)
		c.Upstreams[name] = u
	}
}

// checkRoutes checks upstreams:, routes: and the policies' route matches.
func (c *Config) checkRoutes(k *checker) {
	if c.Upstream != "" && (len(c.Upstreams) > 0 || len(c.Routes) > 0) {
		k.add("upstream", "set either upstream (one origin) or upstreams with routes, not both; move this URL into upstreams")
	}
	if len(c.Upstreams) > 0 && len(c.Routes) == 0 {
		k.add("upstreams", "no route sends requests to these upstreams: add routes: [{name: api, upstream: NAME}]")
	}
	names := make([]string, 0, len(c.Upstreams))
	for name := range c.Upstreams {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c.checkUpstream(k, name, c.Upstreams[name])
	}
	seen := map[string]int{}
	for i := range c.Routes {
		c.checkRoute(k, i, seen)
	}
	if c.Upstream != "" {
		seen[ShorthandName] = 0 // upstream: URL is the route "default"
	}
	for i, p := range c.Policies {
		if r := p.Match.Route; r != "" {
			if _, ok := seen[r]; !ok {
				k.add(fmt.Sprintf("policies[%d].match.route", i), "no route is named %q; use one of the names under routes: (%s)", r, routeNames(c.Routes))
			}
		}
	}
}

func routeNames(rs []Route) string {
	var names []string
	for _, r := range rs {
		if r.Name != "" {
			names = append(names, r.Name)
		}
	}
	if len(names) == 0 {
		return "there are none"
	}
	return strings.Join(names, ", ")
}

// maxTargets bounds a pool: a request's tries remember the targets tried in 64 bits.
const maxTargets = 64

func (c *Config) checkUpstream(k *checker, name string, u Upstream) {
	path := "upstreams." + name
	if !isSFString(name) || name == "" || strings.ContainsAny(name, ".[]") {
		k.add(path, `the name must be printable ASCII without '"', '\', '.', '[' or ']' (got %q)`, name)
	}
	switch {
	case len(u.Targets) == 0:
		k.add(path+".targets", "required: at least one target such as http://10.0.0.1:9000")
	case len(u.Targets) > maxTargets:
		k.add(path+".targets", "at most %d targets (got %d)", maxTargets, len(u.Targets))
	}
	seen := map[string]int{}
	var plain []int // the http:// targets, which a grpc health check cannot reach
	for i, s := range u.Targets {
		tp := fmt.Sprintf("%s.targets[%d]", path, i)
		t, err := ParseTarget(s)
		if err != nil {
			k.addError(FieldError{Path: tp, Problem: err.Error()})
			continue
		}
		if t.URL.Scheme == "http" {
			plain = append(plain, i)
		}
		key := t.URL.Scheme + "://" + strings.ToLower(t.URL.Host)
		if j, dup := seen[key]; dup {
			k.add(tp, "%s is already targets[%d]; give it a weight (#w=2) instead of listing it twice", key, j)
			continue
		}
		seen[key] = i
	}
	k.enum(path+".balance", "balance", u.Balance, balances)
	if u.Retries != nil {
		k.between(path+".retries", *u.Retries, 0, 5)
	}
	k.duration(path+".timeout", u.Timeout, 10*time.Minute)
	k.duration(path+".read_timeout", u.ReadTimeout, 720*time.Hour)
	k.between(path+".max_connections", u.MaxConnections, 1, 1000000)
	if h := u.Health; h != nil {
		hp := path + ".health"
		switch h.Protocol {
		case "http":
			if !strings.HasPrefix(h.Path, "/") || hasControl(h.Path) || strings.ContainsAny(h.Path, " #") {
				k.add(hp+".path", `must be a path starting with "/", such as /healthz (got %q)`, h.Path)
			}
			if h.Service != "" {
				k.add(hp+".service", "is for protocol: grpc only; an http check asks for path")
			}
		case "grpc":
			if h.Path != "" {
				k.add(hp+".path", "is for protocol: http only; a grpc check asks grpc.health.v1.Health/Check about service")
			}
			if hasControl(h.Service) {
				k.add(hp+".service", "must be a gRPC service name such as my.pkg.Service (got %q)", h.Service)
			}
			for _, i := range plain {
				k.add(fmt.Sprintf("%s.targets[%d]", path, i), "a grpc health check needs HTTP/2: write h2c:// (or https://) instead of http://")
			}
		default:
			k.add(hp+".protocol", "must be http or grpc (got %q)", h.Protocol)
		}
		switch {
		case h.Interval < 50*time.Millisecond:
			k.add(hp+".interval", "must be at least 50ms (got %s)", h.Interval)
		case h.Interval > time.Hour:
			k.add(hp+".interval", "must be at most 1h (got %s)", h.Interval)
		}
		k.duration(hp+".timeout", h.Timeout, time.Hour)
		if h.Timeout > 0 && h.Interval > 0 && h.Timeout > h.Interval {
			k.add(hp+".timeout", "must be at most the interval (%s): a check must end before the next starts", h.Interval)
		}
		k.between(hp+".unhealthy", h.Unhealthy, 1, 100)
		k.between(hp+".healthy", h.Healthy, 1, 100)
	}
	k.between(path+".passive.failures", u.Passive.Failures, 1, 10000)
	k.duration(path+".passive.within", u.Passive.Within, time.Hour)
	k.duration(path+".passive.eject", u.Passive.Eject, time.Hour)
}

func (c *Config) checkRoute(k *checker, i int, seen map[string]int) {
	r := c.Routes[i]
	path := fmt.Sprintf("routes[%d]", i)
	k.name(path, "routes", i, r.Name, seen, "the route's name in metrics, logs and policies, such as api")
	switch _, ok := c.Upstreams[r.Upstream]; {
	case r.Upstream == "":
		k.add(path+".upstream", "required: the name of a pool under upstreams:")
	case !ok:
		var names []string
		for n := range c.Upstreams {
			names = append(names, n)
		}
		sort.Strings(names)
		list := "there are none; define it under upstreams:"
		if len(names) > 0 {
			list = "use one of " + strings.Join(names, ", ") + ", or define it under upstreams:"
		}
		k.add(path+".upstream", "unknown upstream %q; %s", r.Upstream, list)
	}
	m := r.Match
	for j, meth := range m.Methods {
		if !isToken(meth) || strings.ToUpper(meth) != meth {
			k.add(fmt.Sprintf("%s.match.methods[%d]", path, j), "must be an upper-case method such as GET (got %q)", meth)
		}
	}
	if pp := m.PathPrefix; pp != "" && !strings.HasPrefix(pp, "/") {
		k.add(path+".match.path_prefix", `must start with "/", such as /api/ (got %q)`, pp)
	}
	if h := m.Host; h != "" && !validRouteHost(h) {
		k.add(path+".match.host", "must be a host name such as api.example.com or *.example.com, without scheme, port or path (got %q)", h)
	}
	for _, name := range sortedKeys(m.Headers) {
		if !isToken(name) {
			k.add(path+".match.headers", "%q is not a header field name", name)
		} else if hasControl(m.Headers[name]) {
			k.add(path+".match.headers", "the value of %s must not hold control characters", name)
		}
	}
	if sp := r.StripPrefix; sp != "" {
		switch {
		case !strings.HasPrefix(sp, "/") || sp == "/":
			k.add(path+".strip_prefix", `must start with "/" and be more than "/", such as /v1 (got %q)`, sp)
		case m.PathPrefix == "" || !strings.HasPrefix(m.PathPrefix, sp):
			k.add(path+".strip_prefix", "must be the start of match.path_prefix (%q), or requests without it would reach this route", m.PathPrefix)
		}
	}
	if r.MaxBody < 0 {
		k.add(path+".max_body", "must not be negative")
	}
	if r.MaxDuration != 0 {
		k.duration(path+".max_duration", r.MaxDuration, 720*time.Hour)
	}
	r.Limits.check(k, path+".limits")
	if w, top := r.Limits.WriteTimeout, c.Limits.WriteTimeout; w > top && top > 0 && w <= maxLimitTimeout {
		k.add(path+".limits.write_timeout", "must be at most limits.write_timeout (%s), which bounds every HTTP/1.1 and HTTP/2 connection whatever its routes; raise that one or shorten this (got %s)", short(top), r.Limits.WriteTimeout)
	}
	for j := range i {
		if Shadows(c.Routes[j].Match, m) {
			k.add(path+".match", "can never match: routes[%d] (%s) comes first and matches every request this one does; move this route above it or narrow that one", j, c.Routes[j].Name)
			break
		}
	}
}

// validRouteHost reports whether h is a host name, optionally "*." and a name below.
func validRouteHost(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	return h != "" && !strings.ContainsAny(h, "/ \t@:*[]") && !hasControl(h)
}

// Shadows reports whether every request that b matches is also matched by a, so that
// a route b after a route a can never be chosen. It errs towards false: an unrelated
// pair is never reported.
func Shadows(a, b RouteMatch) bool {
	if !hostCovers(strings.ToLower(a.Host), strings.ToLower(b.Host)) {
		return false
	}
	if !strings.HasPrefix(b.PathPrefix, a.PathPrefix) {
		return false
	}
	if len(a.Methods) > 0 {
		if len(b.Methods) == 0 {
			return false
		}
		for _, m := range b.Methods {
			if !slices.Contains(a.Methods, m) {
				return false
			}
		}
	}
	for name, v := range a.Headers {
		if bv, ok := headerValue(b.Headers, name); !ok || bv != v {
			return false
		}
	}
	return true
}

// hostCovers reports whether host pattern a matches every host b matches.
func hostCovers(a, b string) bool {
	switch {
	case a == "":
		return true
	case b == "":
		return false
	case a == b:
		return true
	case strings.HasPrefix(a, "*."):
		// *.x covers y.x and *.y.x, not x.
		return strings.HasSuffix(b, a[1:]) && len(strings.TrimPrefix(b, "*.")) > len(a)-2
	}
	return false
}

func headerValue(h map[string]string, name string) (string, bool) {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
