package rules

import "github.com/h3edge/h3edge/limiter"

// Fallback is the local policy that stands in for a global one while Redis cannot
// decide: the backstop with the same quota (Open), or quota ÷ fleet size (Local), made
// on first use for each fleet size.
func (r *Rule) Fallback(fleet int) *limiter.Policy {
	if r.OnFailure != Local || fleet <= 1 {
		return r.Backstop
	}
	if f := r.divided.Load(); f != nil && f.fleet == fleet {
		return f.p
	}
	lim := r.Limiter
	np, err := limiter.NewPolicy(limiter.Policy{Name: fallbackPrefix + r.Name, Algorithm: lim.Algorithm,
		Quota: max(1, lim.Quota/int64(fleet)), Window: lim.Window, MaxDelay: lim.MaxDelay})
	if err != nil {
		return r.Backstop
	}
	r.divided.Store(&dividedPolicy{fleet: fleet, p: np})
	return np
}

// dividedPolicy is a global policy's quota ÷ fleet size, for one fleet size.
type dividedPolicy struct {
	fleet int
	p     *limiter.Policy
}
