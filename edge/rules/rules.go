// Package rules compiles the policies: section of a configuration into the immutable
// rule set a request is matched against: each policy's limiter.Policy, its field
// (RateLimit-Policy item), its match, its key chain and what happens while the shared
// store cannot decide. A reload compiles a new Set and swaps it in; a policy that did
// not change keeps its limiter.Policy, so its counters and clients' state carry over.
package rules

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/route"
	"github.com/h3edge/h3edge/headers"
	"github.com/h3edge/h3edge/limiter"
)

// Mode says whether a policy may refuse (policies[].mode).
type Mode uint8

const (
	// Enforce decides and refuses.
	Enforce Mode = iota
	// Shadow decides and counts, never refuses and is not advertised.
	Shadow
)

// Unit is what a policy counts (policies[].unit).
type Unit uint8

const (
	// Requests charges one unit per request.
	Requests Unit = iota
	// ContentBytes charges the request body's bytes.
	ContentBytes
	// ConcurrentRequests holds one unit from the request's start until its response
	// ends.
	ConcurrentRequests
)

// OnFailure is what a global policy does while Redis cannot decide
// (policies[].on_store_failure).
type OnFailure uint8

const (
	// Open decides against a local backstop with the same quota.
	Open OnFailure = iota
	// Closed refuses with 503.
	Closed
	// Local decides against a local policy with quota ÷ fleet size.
	Local
)

// Set is the compiled form of the policies of one configuration. It is immutable once
// compiled (its exported fields must not be modified) and safe for concurrent use.
type Set struct {
	// Policies are the rules in configuration order.
	Policies []*Rule
	// Chains are the distinct key chains; Rule.Chain indexes them.
	Chains [][]identity.Source
	// Credential lists the non-ip key sources of all chains, in order: the first that
	// yields a value is the request's API key for the plan lookup.
	Credential []identity.Source
	// ByPlan says some rule matches by plan, so requests need their plan looked up.
	ByPlan bool
	// ByRoute says some rule matches by route, so the route a request took must reach
	// Matches through its context (route.With).
	ByRoute bool
	// DefaultPlan is the plan of a key without one (keys.default_plan).
	DefaultPlan string
	// Legacy says X-RateLimit-* fields are sent too (legacy_headers).
	Legacy bool
	// Trusted are the proxies whose forwarded fields are believed (trusted_proxies).
	Trusted []netip.Prefix

	sources limiter.SourcePrefix // ip.ipv4_prefix, ip.ipv6_prefix
	// leases maps global policies to their lease option, for the Redis store.
	leases map[*limiter.Policy]int64
	// policyFields caches the RateLimit-Policy value per set of matched enforced rules
	// (a bit mask over policies): it is stable, so it is built once.
	policyFields sync.Map // uint64 → []string
}

// Rule is one compiled policy. Its exported fields must not be modified.
type Rule struct {
	// Name is the policy's name, the item name in the fields.
	Name string
	// Limiter is the policy the limiter decides; a shadow policy's is its own
	// ("shadow:" prefixed), never shared with an enforced one of the same name.
	Limiter *limiter.Policy
	// Field is the policy's RateLimit-Policy item.
	Field headers.Policy
	// Mode says whether the rule refuses (Enforce) or only counts (Shadow).
	Mode Mode
	// Unit is what the rule charges per request.
	Unit Unit
	// Chain indexes Set.Chains: the key chain that names the client.
	Chain int
	// Bit is the rule's bit in a mask of matched rules (Set.PolicyField).
	Bit uint64

	// Global policies are decided in Redis; while it cannot decide, OnFailure says
	// what happens, against Backstop (Open) or quota ÷ fleet size (Local, Fallback).
	Global    bool
	OnFailure OnFailure
	Backstop  *limiter.Policy
	// Lease is the units an edge may take from Redis at once (policies[].lease).
	Lease int64

	match   match
	divided atomic.Pointer[dividedPolicy]
}

// match is a policy's match: section; every field given must hold.
type match struct {
	pathPrefix string
	methods    []string // upper case
	host       string   // lower case
	plan       string
	route      string // a route's name (match: {route: NAME})
}

// Matches reports whether the rule applies to req, whose host (lower case, without
// port) and plan the caller resolved once for all rules.
func (r *Rule) Matches(req *http.Request, host, plan string) bool {
	m := &r.match
	if m.pathPrefix != "" && !strings.HasPrefix(req.URL.Path, m.pathPrefix) {
		return false
	}
	if len(m.methods) > 0 && !slices.Contains(m.methods, req.Method) {
		return false
	}
	if m.host != "" && m.host != host {
		return false
	}
	if m.route != "" && !routeIs(req, m.route) {
		return false
	}
	return m.plan == "" || m.plan == plan
}

// routeIs reports whether req took the route named name.
func routeIs(req *http.Request, name string) bool {
	m := route.FromContext(req.Context())
	return m != nil && m.Name == name
}

// Cost is what a request of declared length contentLength is charged up front: its
// length for content-bytes (0 when unknown: the body is charged as it streams), else 1.
func (r *Rule) Cost(contentLength int64) int64 {
	if r.Unit == ContentBytes {
		return max(contentLength, 0)
	}
	return 1
}

// Lease returns the lease option of the global policy p (0: exact), for the Redis
// store's Config.Lease.
func (s *Set) Lease(p *limiter.Policy) int64 { return s.leases[p] }

// SourcePrefix is the prefix a client address is counted by (ip.ipv4_prefix,
// ip.ipv6_prefix).
func (s *Set) SourcePrefix(a netip.Addr) netip.Prefix { return s.sources.Prefix(a) }

// PolicyField returns the RateLimit-Policy field value for the enforced rules in mask.
func (s *Set) PolicyField(mask uint64) []string {
	if v, ok := s.policyFields.Load(mask); ok {
		return v.([]string)
	}
	var ps []headers.Policy
	for _, r := range s.Policies {
		if mask&r.Bit != 0 {
			ps = append(ps, r.Field)
		}
	}
	f, _ := headers.PolicyField(ps) // validated in Compile
	v := []string{f}
	s.policyFields.Store(mask, v)
	return v
}
