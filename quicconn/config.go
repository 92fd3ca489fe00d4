package quicconn

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
)

// Config sets the per-source budgets of a Guard. A source is an address prefix: IPv4
// addresses are counted per IPv4Prefix, IPv6 addresses per IPv6Prefix; IPv4-mapped IPv6
// addresses count as IPv4. The zero Config gives the defaults of DESIGN.md §4 (ip:).
type Config struct {
	// ConnRate is the budget of new connections per second per source, refilled as a
	// token bucket with the semantics of golang.org/x/time/rate (the bucket starts full,
	// a refused attempt consumes nothing). If zero, 20 is used; if negative, new
	// connections are not rate limited. At most 1e9.
	ConnRate float64
	// ConnBurst is the connection bucket's size. If zero, twice ConnRate rounded up
	// (at least 1) is used. At most 1<<30.
	ConnBurst int

	// StreamRate is the budget of new request streams per second per source, checked
	// by AllowStream. If zero, 200 is used; if negative, streams are not rate limited.
	// At most 1e9.
	StreamRate float64
	// StreamBurst is the stream bucket's size. If zero, twice StreamRate rounded up
	// (at least 1) is used. At most 1<<30.
	StreamBurst int

	// MaxConnections caps the connections a source may have open at once. If zero, 64
	// is used; if negative, there is no cap.
	MaxConnections int

	// RetryAbove is the rate of unvalidated handshakes per second, over the whole
	// Guard, above which VerifySourceAddress asks every new source without a token to
	// validate its address with a Retry; so does a tenth of it in handshakes begun and
	// not finished at once (100 at the default). If zero, 1000 is used; if negative,
	// neither triggers Retry (a source over its own budget still gets one).
	RetryAbove float64

	// MaxTracked bounds the per-source entries held. If zero, 1000000 is used.
	// At most 1<<31. See Guard for what happens when the table is full.
	MaxTracked int

	// IPv4Prefix is the prefix length IPv4 sources are counted by, 1 to 32.
	// If zero, 32 is used.
	IPv4Prefix int
	// IPv6Prefix is the prefix length IPv6 sources are counted by, 1 to 128.
	// If zero, 64 is used.
	IPv6Prefix int

	// Banned reports whether datagrams, connections and streams from addr are to be
	// dropped. It is called for every datagram a Socket reads (once per run of
	// datagrams from one address in a batch), so it must be fast and safe for
	// concurrent use. The address is never IPv4-mapped. If nil, nothing is banned.
	Banned func(addr netip.Addr) bool
}

// Defaults of the zero Config, the ip: section of DESIGN.md §4.
const (
	DefaultConnRate       = 20
	DefaultStreamRate     = 200
	DefaultMaxConnections = 64
	DefaultRetryAbove     = 1000
	DefaultMaxTracked     = 1000000
	DefaultIPv4Prefix     = 32
	DefaultIPv6Prefix     = 64
)

const (
	maxRate  = 1e9 // one token per nanosecond
	maxBurst = 1 << 30
)

// ErrConfig is wrapped by the errors Validate returns.
var ErrConfig = errors.New("quicconn: invalid config")

// Validate reports the first field that is out of range, wrapping ErrConfig.
func (c Config) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s = %v, want %s", ErrConfig, field, v, want)
	}
	for _, r := range []struct {
		name  string
		rate  float64
		burst int
	}{{"ConnRate", c.ConnRate, c.ConnBurst}, {"StreamRate", c.StreamRate, c.StreamBurst}} {
		if math.IsNaN(r.rate) || math.IsInf(r.rate, 0) || r.rate > maxRate {
			return bad(r.name, r.rate, "a finite number at most 1e9 (negative: unlimited)")
		}
		if r.burst < 0 || r.burst > maxBurst {
			return bad(r.name[:len(r.name)-4]+"Burst", r.burst, "0 to 1<<30")
		}
	}
	if math.IsNaN(c.RetryAbove) {
		return bad("RetryAbove", c.RetryAbove, "a number")
	}
	if c.MaxTracked < 0 || c.MaxTracked > 1<<31 {
		return bad("MaxTracked", c.MaxTracked, "0 to 1<<31")
	}
	if c.IPv4Prefix < 0 || c.IPv4Prefix > 32 {
		return bad("IPv4Prefix", c.IPv4Prefix, "0 to 32")
	}
	if c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		return bad("IPv6Prefix", c.IPv6Prefix, "0 to 128")
	}
	return nil
}

// withDefaults resolves the zero values; the one place defaults live.
func (c Config) withDefaults() Config {
	c.ConnRate, c.ConnBurst = rateDefaults(c.ConnRate, c.ConnBurst, DefaultConnRate)
	c.StreamRate, c.StreamBurst = rateDefaults(c.StreamRate, c.StreamBurst, DefaultStreamRate)
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.RetryAbove == 0 {
		c.RetryAbove = DefaultRetryAbove
	}
	if c.MaxTracked == 0 {
		c.MaxTracked = DefaultMaxTracked
	}
	if c.IPv4Prefix == 0 {
		c.IPv4Prefix = DefaultIPv4Prefix
	}
	if c.IPv6Prefix == 0 {
		c.IPv6Prefix = DefaultIPv6Prefix
	}
	return c
}

func rateDefaults(rate float64, burst int, def float64) (float64, int) {
	if rate == 0 {
		rate = def
	}
	if burst == 0 && rate > 0 {
		burst = max(1, int(math.Ceil(2*rate)))
	}
	return rate, min(burst, maxBurst)
}
