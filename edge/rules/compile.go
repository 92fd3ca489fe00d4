package rules

import (
	"fmt"
	"strings"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/headers"
	"github.com/h3edge/h3edge/limiter"
)

// MaxPolicies bounds the policies of one configuration (a request's matched set is a
// 64-bit mask).
const MaxPolicies = 64

// Prefixes of the limiter.Policy names that stand in for a configured policy: a shadow
// policy's own state, and a global policy's local stand-ins while Redis cannot decide.
// PolicyName strips them.
const (
	shadowPrefix   = "shadow:"
	backstopPrefix = "backstop:"
	fallbackPrefix = "fallback:"
)

// PolicyName names the configured policy a limiter.Policy name stands for, and whether
// it is the shadow one.
func PolicyName(limiterName string) (name string, shadow bool) {
	name = strings.TrimPrefix(limiterName, backstopPrefix)
	name = strings.TrimPrefix(name, fallbackPrefix)
	if n, ok := strings.CutPrefix(name, shadowPrefix); ok {
		return n, true
	}
	return name, false
}

// Compile turns a validated configuration's policies into a Set. prev, if not nil, is
// the set being replaced: a policy whose name and parameters did not change keeps its
// limiter.Policy, so its counters and clients' state carry over a reload.
func Compile(cfg *config.Config, prev *Set) (*Set, error) {
	if len(cfg.Policies) > MaxPolicies {
		return nil, fmt.Errorf("rules: at most %d policies", MaxPolicies)
	}
	s := &Set{
		leases:      map[*limiter.Policy]int64{},
		DefaultPlan: cfg.Keys.DefaultPlan,
		Legacy:      cfg.LegacyHeaders,
		sources:     limiter.SourcePrefix{IPv4: cfg.IP.IPv4Prefix, IPv6: cfg.IP.IPv6Prefix},
		Trusted:     cfg.TrustedProxyPrefixes(),
	}
	chains := chainIndex{set: s, index: map[string]int{}, seen: map[identity.Source]bool{}}
	for i, p := range cfg.Policies {
		r, err := compileRule(p, i, prev)
		if err != nil {
			return nil, fmt.Errorf("rules: policies[%d] (%s): %w", i, p.Name, err)
		}
		r.Chain = chains.of(p.Key)
		if r.Global {
			s.leases[r.Limiter] = r.Lease
		}
		s.ByPlan = s.ByPlan || r.match.plan != ""
		s.ByRoute = s.ByRoute || r.match.route != ""
		s.Policies = append(s.Policies, r)
	}
	if err := s.checkFields(); err != nil {
		return nil, err
	}
	return s, nil
}

// compileRule compiles policies[i], all but its key chain.
func compileRule(p config.Policy, i int, prev *Set) (*Rule, error) {
	r := &Rule{
		Name:  p.Name,
		Mode:  modeOf(p.Mode),
		Unit:  unitOf(p.Unit),
		Field: headers.Policy{Name: p.Name, Quota: p.Quota, Window: p.Window, Unit: headers.Unit(p.Unit)},
		Bit:   1 << i,
		match: match{pathPrefix: p.Match.PathPrefix, host: strings.ToLower(p.Match.Host), plan: p.Match.Plan, route: p.Match.Route},
	}
	for _, m := range p.Match.Methods {
		r.match.methods = append(r.match.methods, strings.ToUpper(m))
	}
	if r.Unit == ConcurrentRequests {
		r.Field.Window = 0 // concurrency has no window to advertise
	}
	lp := limiter.Policy{
		Name:      p.Name,
		Algorithm: limiter.Algorithm(p.Algorithm),
		Quota:     p.Quota,
		Window:    p.Window,
		MaxDelay:  p.MaxDelay,
	}
	if r.Mode == Shadow {
		// Shadow state is its own: a shadow policy never shares units with an
		// enforced one of the same name.
		lp.Name = shadowPrefix + p.Name
	}
	var err error
	if r.Limiter, err = limiter.NewPolicy(lp); err != nil {
		return nil, err
	}
	r.Limiter = prev.carried(r.Limiter)
	if p.Scope == "global" {
		r.Global, r.OnFailure, r.Lease = true, onFailureOf(p.OnStoreFailure), p.Lease
		lp.Name = backstopPrefix + lp.Name
		if r.Backstop, err = limiter.NewPolicy(lp); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// carried returns the policy of s equal to lim (same name and parameters), whose state
// carries over a reload, or lim when s has none (or s is nil).
func (s *Set) carried(lim *limiter.Policy) *limiter.Policy {
	if s == nil {
		return lim
	}
	for _, old := range s.Policies {
		o := old.Limiter
		if o.Name == lim.Name && o.Algorithm == lim.Algorithm && o.Quota == lim.Quota &&
			o.Window == lim.Window && o.MaxDelay == lim.MaxDelay {
			return o
		}
	}
	return lim
}

// chainIndex numbers the distinct key chains of a Set as Compile meets them, and
// collects their credential sources.
type chainIndex struct {
	set   *Set
	index map[string]int // the chain as configured, joined → its index
	seen  map[identity.Source]bool
}

// of returns the index of the chain key, adding it to the set when new.
func (c *chainIndex) of(key []string) int {
	joined := strings.Join(key, ",")
	if i, ok := c.index[joined]; ok {
		return i
	}
	i := len(c.set.Chains)
	c.index[joined] = i
	var chain []identity.Source
	for _, k := range key {
		src, _ := identity.ParseSource(k) // config.Validate refused any other
		chain = append(chain, src)
		if src.Kind != identity.IP && !c.seen[src] {
			c.seen[src] = true
			c.set.Credential = append(c.set.Credential, src)
		}
	}
	c.set.Chains = append(c.set.Chains, chain)
	return i
}

// checkFields checks that every policy set's field serializes, by checking the whole
// set once: a subset of valid items is valid.
func (s *Set) checkFields() error {
	if len(s.Policies) == 0 {
		return nil
	}
	all := make([]headers.Policy, len(s.Policies))
	for i, r := range s.Policies {
		all[i] = r.Field
	}
	if _, err := headers.PolicyField(all); err != nil {
		return fmt.Errorf("rules: policies: %w", err)
	}
	return nil
}

// The configuration keeps its strings (they are what the file says); they are read
// once here. config.Validate refused any other value, and an empty one is the default.

func modeOf(s string) Mode {
	if s == "shadow" {
		return Shadow
	}
	return Enforce
}

func unitOf(s string) Unit {
	switch s {
	case "content-bytes":
		return ContentBytes
	case "concurrent-requests":
		return ConcurrentRequests
	}
	return Requests
}

func onFailureOf(s string) OnFailure {
	switch s {
	case "closed":
		return Closed
	case "local":
		return Local
	}
	return Open
}
