package config

import (
	"cmp"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// The built-in defaults, each also stated on its field's doc comment.
const (
	defaultListen          = ":8443"
	defaultShutdownTimeout = 10 * time.Second
	defaultUpstreamTimeout = 30 * time.Second
	defaultRedisTimeout    = 10 * time.Millisecond
	defaultAdminListen     = "127.0.0.1:9090"
	defaultPlan            = "anonymous"
	altSvcMaxAge           = "86400"
)

// ApplyDefaults resolves every default of the configuration, in this one place: it
// fills zero fields and leaves set ones alone, so calling it again (after a flag changed
// a field) is safe. It also derives what the accessors return. Call it after Load and
// after any field is set by hand, then Validate.
func (c *Config) ApplyDefaults() {
	c.Listen = cmp.Or(c.Listen, defaultListen)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, defaultShutdownTimeout)
	c.UpstreamTimeout = cmp.Or(c.UpstreamTimeout, defaultUpstreamTimeout)
	if c.Redis != nil {
		c.Redis.Timeout = cmp.Or(c.Redis.Timeout, defaultRedisTimeout)
	}
	c.Admin.Listen = cmp.Or(c.Admin.Listen, defaultAdminListen)
	c.acmeDefaults()

	ip := &c.IP
	ip.Connections.defaults(20)
	ip.Streams.defaults(200)
	ip.MaxConnections = cmp.Or(ip.MaxConnections, 64)
	ip.MaxStreamsPerConnection = cmp.Or(ip.MaxStreamsPerConnection, 100)
	ip.RetryAbove = cmp.Or(ip.RetryAbove, 1000)
	ip.MaxTracked = cmp.Or(ip.MaxTracked, 1000000)
	ip.IPv4Prefix = cmp.Or(ip.IPv4Prefix, 32)
	ip.IPv6Prefix = cmp.Or(ip.IPv6Prefix, 64)

	if c.Keys == nil {
		c.Keys = &KeysConfig{}
	}
	c.Keys.DefaultPlan = cmp.Or(c.Keys.DefaultPlan, defaultPlan)

	scope := scopeLocal
	if c.Redis != nil {
		scope = scopeGlobal
	}
	for i := range c.Policies {
		p := &c.Policies[i]
		if len(p.Key) == 0 {
			p.Key = []string{keyIP}
		}
		if p.Algorithm == "" {
			p.Algorithm = algTokenBucket
			if p.Unit == unitConcurrent {
				p.Algorithm = algConcurrency
			}
		}
		if p.Unit == "" {
			p.Unit = unitRequests
			if p.Algorithm == algConcurrency {
				p.Unit = unitConcurrent
			}
		}
		p.Scope = cmp.Or(p.Scope, scope)
		p.OnStoreFailure = cmp.Or(p.OnStoreFailure, "open")
		p.Mode = cmp.Or(p.Mode, "enforce")
	}

	a := &c.Abuse
	a.Rejections = cmp.Or(a.Rejections, 50)
	a.Within = cmp.Or(a.Within, 10*time.Second)
	a.Ban = cmp.Or(a.Ban, time.Minute)
	a.MaxBan = cmp.Or(a.MaxBan, time.Hour)
	if a.Share == nil {
		share := true
		a.Share = &share
	}

	c.Limits.defaults()
	c.LogFormat = cmp.Or(c.LogFormat, "text")
	if l := c.AccessLog; l != nil {
		l.Path = cmp.Or(l.Path, "stdout")
		l.Format = cmp.Or(l.Format, "json")
		l.Sample = cmp.Or(l.Sample, 1)
	}
	c.defaultRoutes()

	// Validate reports the entries that do not parse.
	c.trusted = nil // a fresh slice: an earlier one may still be in use
	for _, s := range c.TrustedProxies {
		if p, ok := ParsePrefix(s); ok {
			c.trusted = append(c.trusted, p)
		}
	}
}

// maxRate bounds Rate.Rate (Validate) and keeps the default burst in range.
const maxRate = 1e6

// defaults fills a zero Rate with rate, and a zero Burst with twice the rate.
func (r *Rate) defaults(rate float64) {
	if r.Rate == 0 {
		r.Rate = rate
	}
	if r.Burst == 0 && r.Rate > 0 && r.Rate <= maxRate {
		r.Burst = max(1, int(math.Ceil(2*r.Rate)))
	}
}

// ParsePrefix reads a CIDR prefix or a single address (as its /32 or /128), masked, as
// trusted_proxies takes them; false if s is neither (or an address with a zone).
func ParsePrefix(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err == nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}

// AltSvcValue is the Alt-Svc field value to send on HTTP/1.1 and HTTP/2 responses, ""
// for none. Unless AltSvc sets it, it is derived from the current Listen, so it follows
// a Listen set by a flag; with port 0 (chosen when listening) it is "", and the server
// should derive the value from the port it bound.
func (c *Config) AltSvcValue() string {
	if c.AltSvc != nil {
		return *c.AltSvc
	}
	_, port, err := net.SplitHostPort(cmp.Or(c.Listen, defaultListen))
	if err != nil || port == "0" {
		return ""
	}
	return `h3=":` + port + `"; ma=` + altSvcMaxAge
}

// TrustedProxyPrefixes returns TrustedProxies parsed (single addresses as /32 or /128),
// as of the last ApplyDefaults. The slice is shared; do not modify it.
func (c *Config) TrustedProxyPrefixes() []netip.Prefix {
	return c.trusted
}

// redacted replaces a secret.
const redacted = "REDACTED"

// Redacted returns a copy of c fit to show (admin API, logs): the Redis password and
// the password in its URL, the admin token and the key-hash secret are replaced by
// "REDACTED".
func (c *Config) Redacted() *Config {
	r := *c
	if c.Redis != nil {
		redis := *c.Redis
		if redis.Password != "" {
			redis.Password = redacted
		}
		if u, err := url.Parse(redis.URL); err != nil && strings.Contains(redis.URL, "@") {
			redis.URL = redacted // unparsable: the password cannot be told apart
		} else if err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), redacted)
				redis.URL = u.String()
			}
		}
		r.Redis = &redis
	}
	if r.Admin.Token != "" {
		r.Admin.Token = redacted
	}
	if c.Keys != nil {
		keys := *c.Keys
		if keys.Secret != "" {
			keys.Secret = redacted
		}
		r.Keys = &keys
	}
	return &r
}
