package bans

import (
	"context"
	"net/netip"
	"time"

	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// Admin shows a penalty box to the admin API (admin.BanList): what the API sets is what
// the box enforces. A ban lifted through it leaves the kernel's filter at once.
type Admin struct {
	Box    *penalty.Box
	Kernel *Kernel // nil: no kernel filter to keep equal
}

var _ admin.BanList = Admin{}

func toAdmin(b penalty.Ban) admin.Ban {
	return admin.Ban{Prefix: b.Prefix, Until: b.Until, Reason: b.Reason, Strikes: b.Count}
}

// List returns the bans in force at now.
func (a Admin) List(now time.Time) []admin.Ban {
	bans := a.Box.List(now)
	out := make([]admin.Ban, len(bans))
	for i, ban := range bans {
		out[i] = toAdmin(ban)
	}
	return out
}

// Add bans p from now for d, and returns the ban in force for p then (a longer one
// already there stays).
func (a Admin) Add(_ context.Context, p netip.Prefix, now time.Time, d time.Duration, reason string) (admin.Ban, error) {
	ban := penalty.Ban{Prefix: p, Until: now.Add(d), Reason: reason}
	if err := a.Box.Add(ban); err != nil {
		return admin.Ban{}, err
	}
	for _, x := range a.Box.List(now) {
		if x.Prefix == p {
			return toAdmin(x), nil
		}
	}
	return toAdmin(ban), nil
}

// Lift ends p's ban, reporting whether there was one.
func (a Admin) Lift(_ context.Context, p netip.Prefix) (bool, error) {
	lifted := a.Box.Lift(p)
	if a.Kernel != nil {
		a.Kernel.Sync()
	}
	return lifted, nil
}
