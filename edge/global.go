package edge

import (
	"context"
	"crypto/tls"
	"net/netip"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter"
	"github.com/h3edge/h3edge/limiter/penalty"
	"github.com/h3edge/h3edge/limiter/redisstore"
)

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
		Lease:         func(p *limiter.Policy) int64 { return s.rules.Load().leases[p] },
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
	s.metrics.breaker = func() bool { return st.Breaker() == redisstore.BreakerOpen }
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

// applySharedBan applies a ban published by any edge (this one's included).
func (s *Server) applySharedBan(p netip.Prefix, until time.Time, reason string) {
	changed, err := s.box.Apply(penalty.Ban{Prefix: p, Until: until, Reason: reason, Shared: true})
	if err != nil || !changed {
		return
	}
	s.guard.Kick(p)
	s.kickTCP(p)
	s.syncKernelBans()
	s.log.Warn("source banned by another edge", "prefix", p.String(), "until", until.Format(time.RFC3339Nano), "reason", reason)
}

// publishBan shares a ban made on this edge.
func (s *Server) publishBan(b penalty.Ban) {
	if s.bans == nil || b.Shared {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.bans.Publish(ctx, b.Prefix, b.Until, b.Reason); err != nil {
			s.log.Warn("ban not shared", "prefix", b.Prefix.String(), "error", err)
		}
	}()
}
