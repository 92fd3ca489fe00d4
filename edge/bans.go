package edge

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/h3edge/h3edge/edge/bans"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// The penalty box (abuse:): a source refused too often is banned, and its datagrams,
// connections and streams are dropped at the layers above the edge handler (DESIGN
// §1; the kernel's filter in package bans). Bans made here are shared through Redis
// with abuse.share, and applied when any edge publishes one.

// newPenaltyBox builds the penalty box of the abuse: section and the kernel filter
// that follows it.
func (s *Server) newPenaltyBox(cfg *config.Config) error {
	box, err := penalty.New(bans.BoxConfig(cfg, s.onBan))
	if err != nil {
		return err
	}
	s.box = box
	return nil
}

// onBan drops a newly banned source everywhere it is still connected: its QUIC
// connections and its TCP connections are closed now; its datagrams, handshakes and
// accepts are dropped from now on by the checks that read the box.
func (s *Server) onBan(b penalty.Ban) {
	quic := s.guard.Kick(b.Prefix)
	tcp := s.tcp.Kick(b.Prefix)
	s.log.Warn("source banned", "prefix", b.Prefix.String(), "until", b.Until.Format(time.RFC3339Nano),
		"count", b.Count, "reason", b.Reason, "closed_quic", quic, "closed_tcp", tcp)
	s.kernelBans.Sync()
	s.publishBan(b)
}

// reject counts a rejection (429) of the request's source toward a ban.
func (s *Server) reject(r *http.Request, now time.Time) {
	s.box.Reject(identity.ClientAddr(r, s.rules.Load().Trusted), now)
}

// applySharedBan applies a ban published by any edge (this one's included).
func (s *Server) applySharedBan(p netip.Prefix, until time.Time, reason string) {
	changed, err := s.box.Apply(penalty.Ban{Prefix: p, Until: until, Reason: reason, Shared: true})
	if err != nil || !changed {
		return
	}
	s.guard.Kick(p)
	s.tcp.Kick(p)
	s.kernelBans.Sync()
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
