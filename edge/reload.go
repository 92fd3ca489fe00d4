package edge

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/h3edge/h3edge/edge/admission"
	"github.com/h3edge/h3edge/edge/bans"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/rules"
)

// restartFields are the settings a reload refuses to change, naming each one changed:
// the sockets, the key hash, the size and shape of the per-source tables, the QUIC and
// HTTP/2 stream limits fixed when the listeners start, the Redis connection and the
// ban subscription made with it. Every other setting is applied by a reload
// (TestReloadFieldsAccountedFor keeps the two lists complete), log_format only when
// Options.SetLogFormat is set.
var restartFields = []string{
	"listen",
	"admin.listen",
	"keys.secret",
	"ip.max_tracked",
	"ip.ipv4_prefix",
	"ip.ipv6_prefix",
	"ip.max_streams_per_connection",
	"redis.url",
	"redis.cluster",
	"redis.sentinel.master",
	"redis.sentinel.addrs",
	"redis.username",
	"redis.password",
	"redis.tls",
	"redis.timeout",
	"abuse.share",
	// The plain HTTP socket, and the ACME manager with its storage and schedule.
	"http_listen",
	"tls.acme.email",
	"tls.acme.domains",
	"tls.acme.ca",
	"tls.acme.ca_roots",
	"tls.acme.challenges",
	"tls.acme.storage",
}

// reloadConfig loads the configuration again and applies it without dropping a
// connection: policies (keeping the state and counters of unchanged ones), plans, ip:
// budgets, abuse: thresholds (keeping bans and rejection counts), upstream and its
// timeout, trusted proxies, Alt-Svc, admin token, certificates, log format and the
// access log (opened anew, also when unchanged).
// Everything is prepared first; if anything is invalid nothing changes and the error
// says what (a ValidationError for the file's problems).
//
// The file and the keys file are read outside reloadMu, so a large keys file holds up
// no other reload; only the comparison with the configuration in force and the commit
// take the lock. Of two reloads that overlap, the one that started later wins: the
// other, finishing after it, changes nothing.
func (s *Server) reloadConfig() error {
	gen := s.reloadGen.Add(1)
	cfg, p, err := s.loadAgain(s.config())
	if err == nil {
		s.reloadMu.Lock()
		defer s.reloadMu.Unlock()
		if gen < s.reloaded {
			s.log.Info("reload superseded by a later one; nothing changed", "file", cfg.File)
			return nil
		}
		err = s.apply(cfg, p)
	}
	if err != nil {
		s.log.Error("reload refused; the old configuration stays", "error", err)
		return err
	}
	s.reloaded = gen
	s.log.Info("configuration reloaded", "file", cfg.File, "policies", len(cfg.Policies))
	return nil
}

// apply puts cfg and its plans p in force (p nil: keep the plans in force), or changes
// nothing and says why. The caller holds reloadMu.
func (s *Server) apply(cfg *config.Config, p *identity.Plans) error {
	old := s.config()
	fixed := restartFields
	if s.opts.SetLogFormat == nil {
		fixed = append(slices.Clip(fixed), "log_format")
	}
	if err := restartOnly(old, cfg, fixed); err != nil {
		return err
	}

	// Prepare.
	cs := s.certs.Load()
	if !reflect.DeepEqual(old.TLS, cfg.TLS) {
		var err error
		if cs, err = s.newCerts(cfg); err != nil {
			return err
		}
	} else if err := cs.Reload(); err != nil {
		return err
	}
	rs, err := rules.Compile(cfg, s.rules.Load())
	if err != nil {
		return err
	}
	if p == nil {
		p = s.plans.Load()
	}
	origin, oldRouting := *s.origin.Load(), s.routing.Load()
	newRouting := oldRouting
	if old.Upstream != cfg.Upstream || old.UpstreamTimeout != cfg.UpstreamTimeout ||
		!reflect.DeepEqual(old.TrustedProxies, cfg.TrustedProxies) ||
		!reflect.DeepEqual(old.Upstreams, cfg.Upstreams) || !reflect.DeepEqual(old.Routes, cfg.Routes) {
		if origin, newRouting, err = s.buildOrigin(cfg, oldRouting); err != nil {
			return err
		}
	}
	// A refusal from here on closes the pools just built: their health checks would
	// probe on, unseen, for as long as the process runs.
	refuse := func(err error) error {
		if newRouting != oldRouting && newRouting != nil {
			newRouting.closeNew(oldRouting)
		}
		return err
	}
	pc := bans.BoxConfig(cfg, s.onBan)
	if err := pc.Validate(); err != nil {
		return refuse(fmt.Errorf("edge: abuse: %w", err))
	}
	// Opened anew on every reload, also when unchanged, so that SIGHUP lets a rotated
	// file go.
	al, err := s.openAccessLog(cfg)
	if err != nil {
		return refuse(err)
	}
	if err := s.guard.SetLimits(admission.GuardConfig(cfg.IP)); err != nil {
		al.Close()
		return refuse(fmt.Errorf("edge: ip: %w", err))
	}

	// Commit. SetLimits cannot fail here: pc is valid, and what it cannot change
	// (the prefix lengths, max_tracked) restartOnly refused.
	if err := s.box.SetLimits(pc); err != nil {
		al.Close()
		return refuse(fmt.Errorf("edge: abuse: %w", err))
	}
	s.tcp.SetCaps(admission.Caps(cfg.Limits))
	s.applyOverload(cfg.Limits)
	s.cfg.Store(cfg)
	s.certs.Store(cs)
	s.rules.Store(rs)
	s.plans.Store(p)
	s.origin.Store(&origin)
	s.setAccessLog(al)
	s.routing.Store(newRouting)
	if newRouting != oldRouting {
		oldRouting.retire(newRouting) // pools no route uses any more drain and close
	}
	if tcpLn, _, _ := s.listeners(); tcpLn != nil {
		s.setAltSvc()
	}
	if cfg.LogFormat != old.LogFormat {
		s.opts.SetLogFormat(cfg.LogFormat)
	}
	return nil
}

// loadAgain produces the new configuration, through Options.Load or from old's file,
// and the plans of its keys: section (nil when they are read from Redis and Redis
// cannot be read: the plans in force stay, and the watcher reads the hash at every
// tick until it can). This is the slow part of a reload, and takes no lock.
func (s *Server) loadAgain(old *config.Config) (*config.Config, *identity.Plans, error) {
	cfg, err := s.loadConfig(old)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case cfg.Keys.File != "":
		p, err := identity.LoadPlans(cfg.Keys.File, s.hasher)
		if err != nil {
			return nil, nil, fmt.Errorf("edge: %w", err)
		}
		return cfg, p, nil
	case cfg.Keys.RedisHash != "":
		p, err := s.redisPlans(cfg.Keys.RedisHash)
		if err != nil {
			return cfg, nil, nil // Redis trouble does not refuse a reload
		}
		return cfg, p, nil
	}
	return cfg, new(identity.Plans), nil
}

// loadConfig reads the configuration again: through Options.Load, or from old's file.
func (s *Server) loadConfig(old *config.Config) (*config.Config, error) {
	if s.opts.Load != nil {
		return s.opts.Load()
	}
	if old.File == "" {
		return config.Default(), nil
	}
	cfg, err := config.Load(old.File)
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

// restartOnly reports the settings among fields (paths such as "redis.url") that
// differ between old and cfg, each naming its path (and place in cfg's file) and
// wrapping errRestart.
func restartOnly(old, cfg *config.Config, fields []string) error {
	var errs []error
	for _, f := range fields {
		if !config.Same(old, cfg, f) {
			errs = append(errs, cfg.Problem(f, errRestart))
		}
	}
	return errors.Join(errs...)
}
