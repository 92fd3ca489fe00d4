package edge

import (
	"errors"
	"fmt"
	"reflect"
)

// reloadConfig loads the configuration again and applies it without dropping a
// connection: policies (keeping the state and counters of unchanged ones), plans, ip:
// budgets, upstream, trusted proxies, Alt-Svc and certificates. Everything is prepared
// first; if anything is invalid nothing changes and the error says what (a
// ValidationError for the file's problems).
func (s *Server) reloadConfig() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	old := s.config()
	cfg, err := s.loadAgain(old)
	if err != nil {
		s.log.Error("reload refused; the old configuration stays", "error", err)
		return err
	}
	if err := restartOnly(old, cfg); err != nil {
		s.log.Error("reload refused; the old configuration stays", "error", err)
		return err
	}

	// Prepare.
	cs := s.certs.Load()
	if !reflect.DeepEqual(old.TLS, cfg.TLS) {
		if cs, err = s.newCerts(cfg); err != nil {
			return err
		}
	} else if err := cs.Reload(); err != nil {
		return err
	}
	rs, err := compileRules(cfg, s.rules.Load())
	if err != nil {
		return err
	}
	p := &plans{}
	switch {
	case cfg.Keys.File != "":
		if p, err = loadPlans(cfg.Keys.File, s.hasher); err != nil {
			return fmt.Errorf("edge: %w", err)
		}
	case cfg.Keys.RedisHash != "":
		// Redis trouble does not refuse a reload: the plans in force stay, whatever
		// their source, and the watcher reads the hash at every tick until it can.
		if p, err = s.redisPlans(cfg.Keys.RedisHash); err != nil {
			p = s.plans.Load()
		}
	}
	origin := *s.origin.Load()
	if old.Upstream != cfg.Upstream || !reflect.DeepEqual(old.TrustedProxies, cfg.TrustedProxies) {
		if origin, err = buildOrigin(cfg); err != nil {
			return err
		}
	}
	if err := s.guard.SetLimits(guardConfig(cfg.IP)); err != nil {
		return fmt.Errorf("edge: ip: %w", err)
	}

	// Commit.
	s.cfg.Store(cfg)
	s.certs.Store(cs)
	s.rules.Store(rs)
	s.plans.Store(p)
	s.origin.Store(&origin)
	if tcpLn, _, _ := s.listeners(); tcpLn != nil {
		s.setAltSvc()
	}
	s.log.Info("configuration reloaded", "file", cfg.File, "policies", len(cfg.Policies))
	return nil
}

// loadAgain produces the new configuration: through Options.Load, or from old's file.
func (s *Server) loadAgain(old *Config) (*Config, error) {
	if s.opts.Load != nil {
		return s.opts.Load()
	}
	if old.File == "" {
		return Default(), nil
	}
	cfg, err := Load(old.File)
	if cfg == nil {
		return nil, err
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// errRestart reports a change that only a restart can make.
var errRestart = errors.New("cannot change while running; restart h3edge to apply it")

// restartOnly reports the changes a reload cannot apply.
func restartOnly(old, cfg *Config) error {
	var errs []error
	check := func(field string, changed bool) {
		if changed {
			errs = append(errs, fmt.Errorf("%s: %w", field, errRestart))
		}
	}
	check("listen", old.Listen != cfg.Listen)
	check("keys.secret", old.Keys.Secret != cfg.Keys.Secret)
	check("ip.max_tracked", old.IP.MaxTracked != cfg.IP.MaxTracked)
	check("ip.ipv4_prefix", old.IP.IPv4Prefix != cfg.IP.IPv4Prefix)
	check("ip.ipv6_prefix", old.IP.IPv6Prefix != cfg.IP.IPv6Prefix)
	check("ip.max_streams_per_connection", old.IP.MaxStreamsPerConnection != cfg.IP.MaxStreamsPerConnection)
	check("admin.listen", old.Admin.Listen != cfg.Admin.Listen)
	check("redis", !reflect.DeepEqual(old.Redis, cfg.Redis))
	return errors.Join(errs...)
}
