package edge

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"github.com/h3edge/h3edge/certs"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/enforce"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/limiter"
	"github.com/h3edge/h3edge/limiter/redisstore"
)

// The per-key quota's wiring: the key hash, the plans, the compiled rules (package
// rules), the local and Redis stores, and the enforcer (package enforce) that decides
// with them in the chain.

// initQuota builds the per-key quota machinery from the configuration.
func (s *Server) initQuota(opts Options) error {
	dir := opts.CertCacheDir
	if dir == "" {
		dir = certs.DefaultCacheDir()
	}
	cfg := s.config()
	secret, err := identity.KeySecret(cfg.Keys.Secret, dir)
	if err != nil {
		return err
	}
	s.hasher = identity.NewHasher(secret)
	p := new(identity.Plans)
	if cfg.Keys.File != "" {
		if p, err = identity.LoadPlans(cfg.Keys.File, s.hasher); err != nil {
			return fmt.Errorf("edge: %w", err)
		}
	}
	s.plans.Store(p)
	rs, err := rules.Compile(cfg, nil)
	if err != nil {
		return err
	}
	s.rules.Store(rs)
	store, err := limiter.NewLocal(limiter.Config{})
	if err != nil {
		return err
	}
	s.store = store
	return nil
}

// initGlobal connects the Redis store of the redis: section, if any: global policies
// are decided there, and with abuse.share bans travel through it. Redis being down at
// start does not stop the edge: the store starts with its circuit open and
// on_store_failure applies until Redis answers.
func (s *Server) initGlobal(cfg *config.Config) error {
	rc := cfg.Redis
	if rc == nil {
		return nil
	}
	rcfg := redisstore.Config{
		URL:           rc.URL,
		Cluster:       rc.Cluster,
		Username:      rc.Username,
		Password:      rc.Password,
		Timeout:       rc.Timeout,
		NegativeCache: true,
		Lease:         func(p *limiter.Policy) int64 { return s.rules.Load().Lease(p) },
		Logger:        s.baseLog,
		Breaker: redisstore.BreakerConfig{OnChange: func(from, to redisstore.BreakerState) {
			s.log.Warn("quota store circuit "+to.String(), "from", from.String())
		}},
	}
	if rc.Sentinel != nil {
		rcfg.Sentinel = &redisstore.Sentinel{Master: rc.Sentinel.Master, Addrs: rc.Sentinel.Addrs}
	}
	if rc.TLS {
		rcfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	st, err := redisstore.New(rcfg)
	if err != nil {
		return err
	}
	s.redis, s.global, s.hashes = st, st, st
	s.storeBreaker = func() bool { return st.Breaker() == redisstore.BreakerOpen }
	if cfg.Abuse.Share == nil || *cfg.Abuse.Share {
		s.bans = st.Bans()
		if err := s.bans.Subscribe(context.Background(), s.applySharedBan); err != nil {
			// Not fatal: bans made here still apply here, and are published once
			// Redis answers again.
			s.log.Warn("ban sharing unavailable: bans made on other edges will not reach this one until restart", "error", err)
		}
	}
	return nil
}

// newEnforcer builds the enforcer on what initQuota and initGlobal made, with the
// metrics, the penalty box and the rejection log as its hooks.
func (s *Server) newEnforcer() *enforce.Enforcer {
	return enforce.New(enforce.Config{
		Rules:        s.rules.Load,
		Plans:        s.plans.Load,
		Hasher:       s.hasher,
		Local:        s.store,
		Global:       s.global,
		Held:         &s.held,
		ObserveKey:   s.metrics.ObserveKey,
		ObserveStore: s.metrics.ObserveStore,
		StoreFailed:  s.metrics.StoreFailed,
		Refused:      s.refused,
		Decided:      s.decided,
	})
}

// enforce decides each request's per-key policies (enforce.Enforcer.Serve) at the
// instant instrument took for it, and hands the admitted ones to the origin.
func (s *Server) enforce(origin http.Handler) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		s.quota.Serve(w, r, now, origin)
	}
}

// decided puts a request's decision and its key's hash prefix (never the key) in its
// access-log line.
func (s *Server) decided(r *http.Request, pk limiter.Key, outcome string) {
	if f := s.accessFields(r); f != nil {
		f.Key, f.HasKey, f.Decision = [8]byte(pk[:8]), true, outcome
	}
}

// refused counts a 429 of a policy toward its source's ban and logs it, at most a few
// lines a second.
func (s *Server) refused(r *http.Request, now time.Time, violated []string, pk limiter.Key, retry time.Duration) {
	if ok, suppressed := s.rejectLog.Allow(time.Now()); ok {
		s.log.Info("request refused", "policies", violated, "pk", fmt.Sprintf("%x", pk[:8]),
			"retry_after", retry, "suppressed", suppressed)
	}
	s.reject(r, now)
}
