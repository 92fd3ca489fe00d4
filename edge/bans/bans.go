// Package bans puts the penalty box (abuse:, limiter/penalty) to work at the transport:
// its configuration from the file, and the kernel's ban filter kept equal to the bans
// in force, so that a banned source's datagrams never wake the edge up. Closing a newly
// banned source's connections and sharing bans through Redis are the edge's wiring.
package bans

import (
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// BoxConfig translates the abuse: section, with the prefix lengths and the bound of
// ip:; onBan runs for every new ban made on this edge.
func BoxConfig(cfg *config.Config, onBan func(penalty.Ban)) penalty.Config {
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

// Kernel keeps a kernel-level ban filter (quicconn.Guard.SetKernelBans: a BPF socket
// filter on the UDP socket) equal to the bans of a box. The user-space filter stays in
// place and covers the lag, the prefixes beyond the kernel filter's bound, and systems
// without it. Make it with NewKernel; Sync is safe for concurrent use.
type Kernel struct {
	box  *penalty.Box
	set  func([]netip.Prefix) error
	log  *slog.Logger
	wake chan struct{}
}

// NewKernel returns a Kernel that sets box's bans with set and logs a failure to log.
func NewKernel(box *penalty.Box, set func([]netip.Prefix) error, log *slog.Logger) *Kernel {
	return &Kernel{box: box, set: set, log: log, wake: make(chan struct{}, 1)}
}

// Sync asks Run to refresh the filter now: the bans changed.
func (k *Kernel) Sync() {
	select {
	case k.wake <- struct{}{}:
	default: // a refresh is already pending
	}
}

// Run refreshes the filter on every Sync and every second, for the bans that end by
// themselves, until done is closed. A failure is logged once until it clears, never
// fatal.
func (k *Kernel) Run(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last []netip.Prefix
	failing := false
	for {
		bans := k.box.List(time.Now())
		ps := make([]netip.Prefix, len(bans))
		for i, b := range bans {
			ps[i] = b.Prefix
		}
		if failing || !slices.Equal(ps, last) {
			err := k.set(ps)
			if err != nil && !failing {
				k.log.Warn("kernel ban filter not set: banned datagrams are dropped in user space only", "error", err)
			}
			failing, last = err != nil, ps
		}
		select {
		case <-done:
			return
		case <-k.wake:
		case <-t.C:
		}
	}
}
