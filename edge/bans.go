package edge

import (
	"context"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// The penalty box (abuse:): a source refused too often is banned, and its datagrams,
// connections and streams are dropped at the layers above the edge handler (DESIGN
// §1). Bans made here are shared through Redis with abuse.share, and applied when any
// edge publishes one.

// newPenaltyBox builds the penalty box of the abuse: section; onBan runs for every new
// ban made on this edge.
func newPenaltyBox(cfg *config.Config, onBan func(penalty.Ban)) (*penalty.Box, error) {
	return penalty.New(penaltyConfig(cfg, onBan))
}

// penaltyConfig translates the abuse: section, with the prefix lengths and the bound of
// ip:.
func penaltyConfig(cfg *config.Config, onBan func(penalty.Ban)) penalty.Config {
	return penalty.Config{
		Rejections: cfg.Abuse.Rejections,
		Within:     cfg.Abuse.Within,
		Ban:        cfg.Abuse.Ban,
		MaxBan:     cfg.Abuse.MaxBan,
		IPv4Prefix: cfg.IP.IPv4Prefix,
		IPv6Prefix: cfg.IP.IPv6Prefix,
		MaxTracked: cfg.IP.MaxTracked,
		OnBan:      onBan,
	}
}

// onBan drops a newly banned source everywhere it is still connected: its QUIC
// connections and its TCP connections are closed now; its datagrams, handshakes and
// accepts are dropped from now on by the checks that read the box.
func (s *Server) onBan(b penalty.Ban) {
	quic := s.guard.Kick(b.Prefix)
	tcp := s.tcp.Kick(b.Prefix)
	s.log.Warn("source banned", "prefix", b.Prefix.String(), "until", b.Until.Format(time.RFC3339Nano),
		"count", b.Count, "reason", b.Reason, "closed_quic", quic, "closed_tcp", tcp)
	s.syncKernelBans()
	s.publishBan(b)
}

// syncKernelBans asks runKernelBans to refresh the kernel's ban filter now.
func (s *Server) syncKernelBans() {
	select {
	case s.kernelBans <- struct{}{}:
	default: // a refresh is already pending
	}
}

// runKernelBans keeps the kernel-level ban filter of the UDP socket (a BPF socket
// filter: banned datagrams never wake the edge up) equal to the bans in force: on every
// ban change (syncKernelBans) and every second, for the bans that end by themselves. The
// user-space filter stays in place and covers the lag, the prefixes beyond the kernel
// filter's bound, and systems without it. A failure is logged, never fatal.
func (s *Server) runKernelBans(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last []netip.Prefix
	failing := false
	for {
		bans := s.box.List(time.Now())
		ps := make([]netip.Prefix, len(bans))
		for i, b := range bans {
			ps[i] = b.Prefix
		}
		if failing || !slices.Equal(ps, last) {
			err := s.guard.SetKernelBans(ps)
			if err != nil && !failing {
				s.log.Warn("kernel ban filter not set: banned datagrams are dropped in user space only", "error", err)
			}
			failing, last = err != nil, ps
		}
		select {
		case <-done:
			return
		case <-s.kernelBans:
		case <-t.C:
		}
	}
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

// boxBans shows the penalty box to the admin API.
type boxBans struct{ s *Server }

func toAdminBan(b penalty.Ban) adminBan {
	return adminBan{Prefix: b.Prefix, Until: b.Until, Reason: b.Reason, Strikes: b.Count}
}

func (b boxBans) List(now time.Time) []adminBan {
	bans := b.s.box.List(now)
	out := make([]adminBan, len(bans))
	for i, ban := range bans {
		out[i] = toAdminBan(ban)
	}
	return out
}

func (b boxBans) Add(_ context.Context, p netip.Prefix, now time.Time, d time.Duration, reason string) (adminBan, error) {
	ban := penalty.Ban{Prefix: p, Until: now.Add(d), Reason: reason}
	if err := b.s.box.Add(ban); err != nil {
		return adminBan{}, err
	}
	for _, x := range b.s.box.List(now) {
		if x.Prefix == p {
			return toAdminBan(x), nil
		}
	}
	return toAdminBan(ban), nil
}

func (b boxBans) Lift(_ context.Context, p netip.Prefix) (bool, error) {
	lifted := b.s.box.Lift(p)
	b.s.syncKernelBans()
	return lifted, nil
}

func (b boxBans) Counts() (active int, total uint64) {
	st := b.s.box.Stats()
	return st.Active, st.Total
}
