package bans

import (
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// The kernel filter follows the box: a ban added and Synced reaches it, and so does
// its lifting.
func TestKernelFollowsBox(t *testing.T) {
	cfg := config.Default()
	cfg.ApplyDefaults()
	box, err := penalty.New(BoxConfig(cfg, nil))
	if err != nil {
		t.Fatal(err)
	}
	sets := make(chan []netip.Prefix, 8)
	k := NewKernel(box, func(ps []netip.Prefix) error { sets <- ps; return nil }, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	defer close(done)
	go k.Run(done)

	p := netip.MustParsePrefix("192.0.2.0/32")
	if err := box.Add(penalty.Ban{Prefix: p, Until: time.Now().Add(time.Hour), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	k.Sync()
	for ps := range sets {
		if slices.Equal(ps, []netip.Prefix{p}) {
			break
		}
	}
	box.Lift(p)
	k.Sync()
	for ps := range sets {
		if len(ps) == 0 {
			break
		}
	}
}
