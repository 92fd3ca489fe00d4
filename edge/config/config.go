// Package config is h3edge's configuration: the YAML file of DESIGN.md §4 decoded
// strictly into Config (every problem placed at its file, line and field), its defaults
// resolved in one place, its validation, and the keys file it names.
//
// It is larger than the module's other rooms (about 3 000 lines) on purpose: it is one
// schema, and its types, their defaults, their validation and the strict decoder that
// places each problem belong together — a new field is added, defaulted and validated
// in one package, which the reflection tests check is complete. Splitting it by section
// (routes, ACME, keys) would spread one contract over packages that would all import
// one another's types. Each section has its own files instead (routes.go, acme.go,
// keys.go beside load.go, defaults.go and validate.go).
package config

import (
	"net/netip"
	"time"
)

// Config is the edge's whole configuration: the YAML file of DESIGN.md §4 decodes
// straight into it. Zero values mean "use the default"; ApplyDefaults resolves them in
// one place and Validate reports every problem at once.
type Config struct {
	// Listen is the host:port for TCP (HTTP/1.1, HTTP/2) and UDP (HTTP/3); port 0
	// picks a free one. If empty, ":8443" is used.
	Listen string `yaml:"listen"`
	// HTTPListen is a host:port for plain HTTP that answers ACME HTTP-01 challenges
	// and redirects every other request to https with 308. If empty, there is none.
	// (DESIGN.md §10.)
	HTTPListen string `yaml:"http_listen,omitempty"`
	// AltSvc is the Alt-Svc field value sent on HTTP/1.1 and HTTP/2 responses.
	// If nil (absent, or written as "alt_svc:" with no value), `h3=":PORT"; ma=86400`
	// derived from Listen is used; "" disables it. See AltSvcValue.
	AltSvc *string `yaml:"alt_svc"`
	// ShutdownTimeout bounds how long in-flight requests may drain on SIGTERM.
	// If zero, 10s is used; at most 10m.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Upstream is the origin's base URL (http or https): the shorthand for one pool
	// with this one target and one route for every request, both named "default". If
	// empty, and Upstreams too, the built-in demo origin answers.
	Upstream string `yaml:"upstream"`
	// UpstreamTimeout bounds the wait for the upstream's response header; past it the
	// client gets 504. If zero, 30s is used; at most 10m. (Not in DESIGN.md §4: added
	// because a 504 needs a bound an operator can set.)
	UpstreamTimeout time.Duration `yaml:"upstream_timeout"`
	// TrustedProxies lists CIDR prefixes (or single addresses) whose X-Forwarded-For and
	// Forwarded fields are believed. If empty, no forwarded field is believed.
	// See TrustedProxyPrefixes.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// TLS selects the certificates.
	TLS TLSConfig `yaml:"tls"`
	// Redis is the shared quota store. If nil, all quota is local to this edge.
	Redis *RedisConfig `yaml:"redis"`
	// Admin places the admin API.
	Admin AdminConfig `yaml:"admin"`
	// IP holds the coarse per-source limits.
	IP IPConfig `yaml:"ip"`
	// Keys maps API keys to plans. ApplyDefaults makes it non-nil, so DefaultPlan is
	// always set.
	Keys *KeysConfig `yaml:"keys"`
	// Upstreams are the named pools of targets routes send requests to (DESIGN.md
	// §9). If empty, Upstream (or the demo origin) serves every request.
	Upstreams map[string]Upstream `yaml:"upstreams"`
	// Routes send requests to Upstreams, the first that matches winning; a request no
	// route matches gets 404. Required with Upstreams.
	Routes []Route `yaml:"routes"`
	// Policies are the rate-limit rules. If empty, only the limits of IP apply.
	Policies []Policy `yaml:"policies"`
	// Abuse drives the penalty box.
	Abuse AbuseConfig `yaml:"abuse"`
	// Limits bounds what slow clients can hold.
	Limits LimitsConfig `yaml:"limits"`
	// LegacyHeaders also sends X-RateLimit-Limit/-Remaining/-Reset.
	LegacyHeaders bool `yaml:"legacy_headers"`
	// LogFormat is "text" or "json". If empty, "text" is used.
	LogFormat string `yaml:"log_format"`
	// AccessLog writes one line per request (DESIGN.md §11). If nil, there is no
	// access log.
	AccessLog *AccessLogConfig `yaml:"access_log"`

	// File is the path the configuration was loaded from ("" for built-in defaults).
	File string `yaml:"-"`
	// pos maps field paths such as "policies[0].quota" to their place in File, for
	// error messages. Filled by the loader.
	pos map[string]position `yaml:"-"`
	// parsed is the file's configuration with defaults applied, as Parse decoded it:
	// a problem is placed in File only where the value still is the file's (a flag
	// may have replaced it since).
	parsed *Config `yaml:"-"`
	// decodeErrs are Parse's problems (unknown keys, wrong types); Validate repeats them.
	decodeErrs problemList `yaml:"-"`
	// shadowed are paths whose Validate problems would only echo a decode problem:
	// the paths of decode errors and of the keys suggested for misspelled ones.
	shadowed map[string]bool `yaml:"-"`
	// trusted is TrustedProxies parsed by ApplyDefaults.
	trusted []netip.Prefix `yaml:"-"`
}

// position is a place in the configuration file.
type position struct{ line, col int }

// TLSConfig selects the certificates.
type TLSConfig struct {
	// Certificates are PEM pairs chosen by SNI. If empty, a self-signed development
	// certificate for localhost, 127.0.0.1 and ::1 is generated once and cached.
	Certificates []CertPair `yaml:"certificates"`
	// ACME obtains and renews certificates from an ACME CA (acme.go). If nil, there
	// is no ACME. With Certificates too, a file's names win for SNI.
	ACME *ACMEConfig `yaml:"acme,omitempty"`
}

// CertPair names one PEM certificate chain and its private key.
type CertPair struct {
	// Cert is the path of the PEM certificate chain. Required.
	Cert string `yaml:"cert"`
	// Key is the path of the PEM private key. Required.
	Key string `yaml:"key"`
}

// RedisConfig selects the shared quota store. Exactly one of URL, Cluster and Sentinel
// is set.
type RedisConfig struct {
	// URL is redis://[user:password@]host:port/db or rediss:// for TLS.
	URL string `yaml:"url"`
	// Cluster lists seed addresses of a Redis Cluster.
	Cluster []string `yaml:"cluster"`
	// Sentinel names the master and the sentinels' addresses.
	Sentinel *SentinelConfig `yaml:"sentinel"`
	// Username is the user for Cluster and Sentinel (URL carries its own).
	Username string `yaml:"username"`
	// Password is the password for Cluster and Sentinel (URL carries its own).
	Password string `yaml:"password"`
	// TLS dials Cluster and Sentinel with TLS (with URL, use rediss:// instead).
	TLS bool `yaml:"tls"`
	// Timeout is the budget for one decision's round trip; past it on_store_failure
	// applies. If zero, 10ms is used; at most 5s.
	Timeout time.Duration `yaml:"timeout"`
}

// SentinelConfig names a Sentinel-managed master.
type SentinelConfig struct {
	// Master is the name of the master set. Required.
	Master string `yaml:"master"`
	// Addrs are the sentinels' host:port addresses. At least one.
	Addrs []string `yaml:"addrs"`
}

// AdminConfig places the admin API (metrics, health, API, dashboard).
type AdminConfig struct {
	// Listen is the admin host:port, never the public one. If empty, 127.0.0.1:9090
	// is used; "off" disables it.
	Listen string `yaml:"listen"`
	// Token is the bearer token the admin API requires. Required when Listen is not a
	// loopback address.
	Token string `yaml:"token"`
}

// AccessLogConfig is the access log: one line per request, written by a buffered
// writer that drops lines (counted in access_log_dropped_total) rather than hold a
// request up.
type AccessLogConfig struct {
	// Path is "stdout" or a file, opened for appending (created with mode 0640 if it
	// does not exist) at start and again on every reload, so that a rotated file is let
	// go on SIGHUP. If empty, "stdout" is used.
	Path string `yaml:"path"`
	// Format is "json" (one object per line) or "common" (the Common Log Format). If
	// empty, "json" is used.
	Format string `yaml:"format"`
	// Sample is the fraction of requests logged, more than 0 and at most 1, each
	// request drawn at random. If zero, 1 is used.
	Sample float64 `yaml:"sample"`
}

// Rate is a token-bucket budget: Rate per second, up to Burst at once.
type Rate struct {
	// Rate is the sustained rate per second, at most 1000000.
	Rate float64 `yaml:"rate"`
	// Burst is how many may come at once, at most 10000000. If zero, twice Rate
	// (rounded up) is used.
	Burst int `yaml:"burst"`
}

// IPConfig holds the coarse per-source limits, always local to the edge.
type IPConfig struct {
	// Connections is the budget of new connections per second per source.
	// If zero, {rate: 20, burst: 40} is used.
	Connections Rate `yaml:"connections"`
	// Streams is the budget of new request streams per second per source.
	// If zero, {rate: 200, burst: 400} is used.
	Streams Rate `yaml:"streams"`
	// MaxConnections caps concurrent connections per source. If zero, 64 is used;
	// at most 1000000.
	MaxConnections int `yaml:"max_connections"`
	// MaxStreamsPerConnection caps concurrent request streams per connection.
	// If zero, 100 is used; at most 65535.
	MaxStreamsPerConnection int `yaml:"max_streams_per_connection"`
	// RetryAbove is the rate of QUIC handshakes per second above which new sources
	// must validate their address with a Retry; so must they while more than a tenth
	// of it have begun and not finished (spoofed sources never finish). If zero, 1000
	// is used; at most 10000000.
	RetryAbove int `yaml:"retry_above"`
	// MaxTracked bounds the per-source state. If zero, 1000000 is used; at most
	// 100000000.
	MaxTracked int `yaml:"max_tracked"`
	// IPv4Prefix is the prefix length IPv4 sources are counted by, 8 to 32.
	// If zero, 32 is used.
	IPv4Prefix int `yaml:"ipv4_prefix"`
	// IPv6Prefix is the prefix length IPv6 sources are counted by, 16 to 128.
	// If zero, 64 is used.
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

// KeysConfig maps API keys to plans.
type KeysConfig struct {
	// File is a YAML map {key: plan}, reloaded when it changes.
	File string `yaml:"file"`
	// RedisHash is a Redis hash holding {key: plan}, instead of File. Needs Redis.
	RedisHash string `yaml:"redis_hash"`
	// DefaultPlan is the plan of keys not in the map. If empty, "anonymous" is used.
	DefaultPlan string `yaml:"default_plan"`
	// Secret is the key-hash secret. If empty, one is generated once and cached.
	Secret string `yaml:"secret"`
}

// Policy is one rate-limit rule of DESIGN.md §4.
type Policy struct {
	// Name is the item name in RateLimit-Policy and RateLimit, a Structured Fields
	// String: printable ASCII without '"' or '\'. Required and unique.
	Name string `yaml:"name"`
	// Match selects the requests the policy applies to. If empty, all requests.
	Match Match `yaml:"match"`
	// Key lists where the client key comes from, first that yields a value:
	// "header:NAME", "bearer", "query:NAME", "ip". If empty, [ip] is used.
	Key []string `yaml:"key"`
	// Algorithm is token_bucket, gcra, fixed_window, sliding_window, sliding_log,
	// leaky_bucket or concurrency. If empty, token_bucket is used (concurrency when
	// Unit is concurrent-requests).
	Algorithm string `yaml:"algorithm"`
	// Quota is the units per window (token_bucket: capacity). Required, > 0.
	Quota int64 `yaml:"quota"`
	// Window is the period, whole seconds. Required, except for concurrency, which
	// has none.
	Window time.Duration `yaml:"window"`
	// Unit is requests, content-bytes or concurrent-requests. If empty, requests is
	// used (concurrent-requests with the concurrency algorithm).
	Unit string `yaml:"unit"`
	// Scope is global (Redis) or local. If empty: global when redis is configured,
	// local otherwise.
	Scope string `yaml:"scope"`
	// OnStoreFailure is open, closed or local. If empty, open.
	OnStoreFailure string `yaml:"on_store_failure"`
	// Mode is enforce or shadow. If empty, enforce.
	Mode string `yaml:"mode"`
	// MaxDelay lets leaky_bucket delay a request up to this long instead of rejecting.
	// If zero, requests are never delayed.
	MaxDelay time.Duration `yaml:"max_delay"`
	// Lease is how many units an edge may take at once for a hot key (global scope
	// only), at most Quota. If zero, every decision asks the store (exact).
	Lease int64 `yaml:"lease"`
}

// Match selects the requests a policy applies to. Empty fields match everything.
type Match struct {
	// PathPrefix matches request paths starting with it; it starts with "/".
	PathPrefix string `yaml:"path_prefix"`
	// Methods are upper-case request methods such as GET.
	Methods []string `yaml:"methods"`
	// Host matches the request's host name.
	Host string `yaml:"host"`
	// Plan matches clients whose API key maps to this plan (see KeysConfig).
	Plan string `yaml:"plan"`
	// Route matches requests that the route of this name (under routes:) took.
	Route string `yaml:"route"`
}

// AbuseConfig drives the penalty box.
type AbuseConfig struct {
	// Rejections within Within ban a source. If zero, 50 is used.
	Rejections int `yaml:"rejections"`
	// Within is the counting period. If zero, 10s is used; at most 24h.
	Within time.Duration `yaml:"within"`
	// Ban is the first ban's length, doubled on each repeat. If zero, 1m is used;
	// at most 720h.
	Ban time.Duration `yaml:"ban"`
	// MaxBan caps the ban length, at least Ban. If zero, 1h is used; at most 720h.
	MaxBan time.Duration `yaml:"max_ban"`
	// Share publishes bans through Redis. If nil, true is used.
	Share *bool `yaml:"share"`
}

// LimitsConfig bounds what a slow client can hold (limits:, DESIGN.md §9). It is the
// top-level section; a route may carry its own, whose zero fields take the top
// level's values (Or).
type LimitsConfig struct {
	// BodyReadTimeout ends a request whose body makes no progress for this long while
	// the edge waits for it: the client gets 408. If zero, 30s is used; at most 10m.
	BodyReadTimeout time.Duration `yaml:"body_read_timeout"`
	// WriteTimeout closes an HTTP/1.1 or HTTP/2 connection on which a write of the
	// response makes no progress for this long (a client that does not read). If zero,
	// 60s is used; at most 10m. HTTP/3 responses are bounded by the client's
	// flow-control window and the idle timeout instead. In a route's limits it bounds
	// each write of the route's responses instead, on all three protocols: see
	// Route.Limits.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxConnections caps the TCP connections (HTTP/1.1 and HTTP/2) open at once, from
	// all sources: over it, the connection pending longest (see MaxPendingConnections)
	// is reset, or the new one at accept when none is. If zero, it is sized from the
	// machine at start: 4 096 per core, at most 3/4 of the file descriptor limit; -1:
	// not capped. Top level only.
	MaxConnections int `yaml:"max_connections"`
	// MaxPendingConnections caps the TCP connections whose first request has not
	// reached the edge yet (in their TLS handshake or header section: what slowloris
	// holds): over it, the one pending longest is reset. If zero, 256 per core; -1:
	// not capped. Top level only.
	MaxPendingConnections int `yaml:"max_pending_connections"`
	// MaxInflightRequests caps the requests being handled at once, on all protocols
	// together: over it a new request gets a prebuilt 503 with Retry-After: 1 before
	// any policy or upstream sees it. Past half of it, each source (its client
	// address) has a share: the room left under the cap divided among the sources
	// holding requests, at least a 64th of the half; a request from a source holding
	// its share gets the same 503 and charges the source a rejection toward a ban. If
	// zero, it is sized from the machine at start: 1 024 per core; -1: not capped. Top
	// level only.
	MaxInflightRequests int `yaml:"max_inflight_requests"`
	// MaxGoroutines is the goroutine count over which the edge sheds new work — new
	// QUIC connections refused, new TCP connections reset at accept, new requests
	// answered 503 with Retry-After — until it falls below 90 % of it; the same
	// happens while the memory the process holds is at 90 % of its memory limit
	// (GOMEMLIMIT, or the one h3edge sets from its cgroup). If zero, 50 000 per core;
	// -1: goroutines never shed (memory still does). Top level only.
	MaxGoroutines int `yaml:"max_goroutines"`
}
