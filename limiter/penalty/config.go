package penalty

import (
	"errors"
	"fmt"
	"time"
)

// Config configures a Box. The zero Config gives the defaults of DESIGN.md §4: abuse: for
// the thresholds, ip: for the prefix lengths and the bound.
type Config struct {
	// Rejections is how many rejections a source may earn within Within and stay
	// unbanned: the next one bans it. If zero, 50 is used. At most 1<<30.
	Rejections int
	// Within is the period rejections are counted over, in eight sub-windows of
	// Within/8 each: a source is banned only when more than Rejections of its
	// rejections lie within a span shorter than Within, and always when they lie
	// within 7/8 of Within. If zero, 10s is used; at least 8ns.
	Within time.Duration
	// Ban is the length of a source's first ban. Each further ban of the same prefix,
	// while the box remembers the last one, lasts twice as long as the one before. If
	// zero, 1m is used.
	Ban time.Duration
	// MaxBan caps the length of a ban, and is how long after a ban ends the box
	// remembers it: a source banned again within MaxBan of its last ban's end gets a
	// doubled ban, one that stays out of trouble that long starts again at Ban. If zero,
	// 1h is used; at least Ban.
	MaxBan time.Duration

	// IPv4Prefix is the prefix length IPv4 sources are counted and banned by, 1 to 32.
	// IPv4-mapped IPv6 addresses count as IPv4. If zero, 32 is used.
	IPv4Prefix int
	// IPv6Prefix is the prefix length IPv6 sources are counted and banned by, 1 to 128.
	// If zero, 64 is used.
	IPv6Prefix int

	// MaxTracked bounds the sources that have a rejection count, and separately the ban
	// records (bans in force plus ended bans still remembered). A rejection count takes
	// about 150 bytes, a ban in force about 400. If zero, 1,000,000 is used. At most 1<<31.
	MaxTracked int

	// OnBan, if not nil, is called once for every ban the box makes (Reject) or is told
	// to make or extend by Add, on the goroutine that called them, after the box's locks
	// are released: it may call the box. It is not called for Apply. The edge closes the
	// prefix's connections in it and publishes the ban to other edges.
	OnBan func(Ban)
}

// Defaults of the zero Config.
const (
	defaultRejections = 50
	defaultWithin     = 10 * time.Second
	defaultBan        = time.Minute
	defaultMaxBan     = time.Hour
	defaultIPv4Prefix = 32
	defaultIPv6Prefix = 64
	defaultMaxTracked = 1_000_000
)

// ErrConfig is wrapped by the errors of Config.Validate.
var ErrConfig = errors.New("penalty: invalid config")

// Validate reports the first field out of range, wrapping ErrConfig.
func (c Config) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s = %v, want %s", ErrConfig, field, v, want)
	}
	switch {
	case c.Rejections < 0 || c.Rejections > 1<<30:
		return bad("Rejections", c.Rejections, "0 to 1<<30")
	case c.Within < 0 || c.Within > 0 && c.Within < 8:
		return bad("Within", c.Within, "0 or at least 8ns")
	case c.Ban < 0:
		return bad("Ban", c.Ban, "not negative")
	case c.MaxBan < 0:
		return bad("MaxBan", c.MaxBan, "not negative")
	case c.IPv4Prefix < 0 || c.IPv4Prefix > 32:
		return bad("IPv4Prefix", c.IPv4Prefix, "0 to 32")
	case c.IPv6Prefix < 0 || c.IPv6Prefix > 128:
		return bad("IPv6Prefix", c.IPv6Prefix, "0 to 128")
	case c.MaxTracked < 0 || c.MaxTracked > 1<<31:
		return bad("MaxTracked", c.MaxTracked, "0 to 1<<31")
	}
	if d := c.withDefaults(); d.Ban > d.MaxBan {
		return bad("Ban", d.Ban, fmt.Sprintf("at most MaxBan (%v)", d.MaxBan))
	}
	return nil
}

// withDefaults resolves the zero values; the one place the defaults are applied.
func (c Config) withDefaults() Config {
	zero := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	zeroD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	zero(&c.Rejections, defaultRejections)
	zeroD(&c.Within, defaultWithin)
	zeroD(&c.Ban, defaultBan)
	zeroD(&c.MaxBan, defaultMaxBan)
	zero(&c.IPv4Prefix, defaultIPv4Prefix)
	zero(&c.IPv6Prefix, defaultIPv6Prefix)
	zero(&c.MaxTracked, defaultMaxTracked)
	return c
}
