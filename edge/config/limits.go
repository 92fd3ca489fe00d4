package config

import "time"

// The limits' defaults.
const (
	defaultBodyReadTimeout = 30 * time.Second
	defaultWriteTimeout    = 60 * time.Second
	maxLimitTimeout        = 10 * time.Minute
)

// defaults fills the zero fields with the built-in defaults.
func (l *LimitsConfig) defaults() {
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = defaultBodyReadTimeout
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = defaultWriteTimeout
	}
}

// Or returns l with its zero fields taken from top: a route's limits over the
// top-level ones.
func (l LimitsConfig) Or(top LimitsConfig) LimitsConfig {
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = top.BodyReadTimeout
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = top.WriteTimeout
	}
	return l
}

// check adds the problems of the limits at path ("limits", or a route's, whose zero
// timeouts are the top level's).
func (l LimitsConfig) check(k *checker, path string) {
	top := path == "limits"
	if top || l.BodyReadTimeout != 0 {
		k.duration(path+".body_read_timeout", l.BodyReadTimeout, maxLimitTimeout)
	}
	if top || l.WriteTimeout != 0 {
		k.duration(path+".write_timeout", l.WriteTimeout, maxLimitTimeout)
	}
	for _, c := range []struct {
		key string
		v   int
	}{{"max_connections", l.MaxConnections}, {"max_pending_connections", l.MaxPendingConnections},
		{"max_inflight_requests", l.MaxInflightRequests}, {"max_goroutines", l.MaxGoroutines}} {
		switch p := path + "." + c.key; {
		case c.v != 0 && !top:
			k.add(p, "the cap is the whole edge's: top-level limits only")
		case c.v < -1:
			k.add(p, "must be a cap, 0 (sized from the machine) or -1 (not capped) (got %d)", c.v)
		}
	}
}
