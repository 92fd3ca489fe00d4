package rules

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/limiter"
)

// compile validates ps in a default configuration and compiles it over prev.
func compile(t *testing.T, prev *Set, ps ...config.Policy) *Set {
	t.Helper()
	return compileWith(t, config.Default(), prev, ps...)
}

// compileWith is compile in cfg.
func compileWith(t *testing.T, cfg *config.Config, prev *Set, ps ...config.Policy) *Set {
	t.Helper()
	cfg.Policies = ps
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := Compile(cfg, prev)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The configuration's strings become the typed values once, with their defaults.
func TestCompileTyped(t *testing.T) {
	s := compile(t, nil,
		config.Policy{Name: "burst", Quota: 10, Window: time.Minute},
		config.Policy{Name: "shadow", Quota: 5, Window: time.Minute, Mode: "shadow"},
		config.Policy{Name: "uploads", Quota: 1 << 20, Window: time.Minute, Unit: "content-bytes"},
		config.Policy{Name: "inflight", Algorithm: "concurrency", Unit: "concurrent-requests", Quota: 4},
	)
	for i, want := range []struct {
		mode Mode
		unit Unit
		lim  string
	}{
		{Enforce, Requests, "burst"},
		{Shadow, Requests, "shadow:shadow"},
		{Enforce, ContentBytes, "uploads"},
		{Enforce, ConcurrentRequests, "inflight"},
	} {
		r := s.Policies[i]
		if r.Mode != want.mode || r.Unit != want.unit || r.Limiter.Name != want.lim || r.Bit != 1<<i {
			t.Errorf("%s: mode %d unit %d limiter %q bit %b, want %d %d %q %b", r.Name, r.Mode, r.Unit, r.Limiter.Name, r.Bit,
				want.mode, want.unit, want.lim, 1<<i)
		}
		if r.Global || r.Backstop != nil {
			t.Errorf("%s: global without redis:", r.Name)
		}
	}
	if s.Policies[3].Field.Window != 0 {
		t.Error("a concurrency policy advertises a window")
	}
	if got := s.Policies[2].Cost(300); got != 300 {
		t.Errorf("content-bytes cost of 300 bytes: %d", got)
	}
	if got := s.Policies[0].Cost(300); got != 1 {
		t.Errorf("requests cost: %d", got)
	}
}

// Global policies: on_store_failure typed, a backstop of their own, their lease, and
// Fallback dividing the quota by the fleet only for local.
func TestCompileGlobal(t *testing.T) {
	cfg := config.Default()
	cfg.Redis = &config.RedisConfig{URL: "redis://127.0.0.1:1/0"}
	s := compileWith(t, cfg, nil,
		config.Policy{Name: "open", Quota: 100, Window: time.Minute, Lease: 10},
		config.Policy{Name: "closed", Quota: 100, Window: time.Minute, OnStoreFailure: "closed"},
		config.Policy{Name: "local", Quota: 100, Window: time.Minute, OnStoreFailure: "local"},
	)
	open, closed, local := s.Policies[0], s.Policies[1], s.Policies[2]
	if !open.Global || open.OnFailure != Open || closed.OnFailure != Closed || local.OnFailure != Local {
		t.Fatalf("on_store_failure: %d %d %d", open.OnFailure, closed.OnFailure, local.OnFailure)
	}
	if s.Lease(open.Limiter) != 10 || s.Lease(closed.Limiter) != 0 {
		t.Errorf("leases %d %d, want 10 and 0", s.Lease(open.Limiter), s.Lease(closed.Limiter))
	}
	if open.Fallback(4) != open.Backstop || open.Backstop.Quota != 100 || open.Backstop == open.Limiter {
		t.Error("open: the fallback is not the backstop with the same quota")
	}
	f := local.Fallback(4)
	if f.Quota != 25 || local.Fallback(4) != f || local.Fallback(1) != local.Backstop {
		t.Errorf("local over 4 edges: quota %d, want 25 (made once); over one edge the backstop", f.Quota)
	}
	for p, want := range map[*limiter.Policy]string{f: "local", open.Backstop: "open", open.Limiter: "open"} {
		if name, shadow := PolicyName(p.Name); name != want || shadow {
			t.Errorf("PolicyName(%q) = %q, %v; want %q", p.Name, name, shadow, want)
		}
	}
	if name, shadow := PolicyName("shadow:burst"); name != "burst" || !shadow {
		t.Errorf("PolicyName(shadow:burst) = %q, %v", name, shadow)
	}
}

// A reload keeps the limiter.Policy (and so the state) of a policy that did not change,
// and only of it.
func TestCompileCarriesOver(t *testing.T) {
	a := config.Policy{Name: "a", Quota: 10, Window: time.Minute}
	b := config.Policy{Name: "b", Quota: 10, Window: time.Minute}
	old := compile(t, nil, a, b)
	b.Quota = 20
	s := compile(t, old, b, a)
	if s.Policies[1].Limiter != old.Policies[0].Limiter {
		t.Error("unchanged policy a got a new limiter.Policy")
	}
	if s.Policies[0].Limiter == old.Policies[1].Limiter {
		t.Error("changed policy b kept its old limiter.Policy")
	}
}

// Chains naming the same sources are one; the credential sources of all chains are
// listed once, in order, without ip.
func TestCompileChains(t *testing.T) {
	s := compile(t, nil,
		config.Policy{Name: "a", Key: []string{"header:x-api-key", "ip"}, Quota: 1, Window: time.Minute},
		config.Policy{Name: "b", Key: []string{"bearer", "header:X-Api-Key"}, Quota: 1, Window: time.Minute},
		config.Policy{Name: "c", Key: []string{"header:x-api-key", "ip"}, Quota: 1, Window: time.Minute},
	)
	if len(s.Chains) != 2 || s.Policies[0].Chain != s.Policies[2].Chain || s.Policies[1].Chain == s.Policies[0].Chain {
		t.Fatalf("chains %v, policy chains %d %d %d", s.Chains, s.Policies[0].Chain, s.Policies[1].Chain, s.Policies[2].Chain)
	}
	want := []identity.Source{{Kind: identity.Header, Name: "X-Api-Key"}, {Kind: identity.Bearer}}
	if len(s.Credential) != 2 || s.Credential[0] != want[0] || s.Credential[1] != want[1] {
		t.Errorf("credential sources %v, want %v", s.Credential, want)
	}
}

func TestMatches(t *testing.T) {
	s := compile(t, nil, config.Policy{Name: "m", Quota: 1, Window: time.Minute,
		Match: config.Match{PathPrefix: "/api/", Methods: []string{"POST"}, Host: "API.example.com", Plan: "free"}})
	r := s.Policies[0]
	if !s.ByPlan {
		t.Error("ByPlan not set by a plan match")
	}
	req := httptest.NewRequest("POST", "https://api.example.com/api/x", nil)
	for _, tc := range []struct {
		path, method, host, plan string
		want                     bool
	}{
		{"/api/x", "POST", "api.example.com", "free", true},
		{"/other", "POST", "api.example.com", "free", false},
		{"/api/x", "GET", "api.example.com", "free", false},
		{"/api/x", "POST", "www.example.com", "free", false},
		{"/api/x", "POST", "api.example.com", "gold", false},
	} {
		req.URL.Path, req.Method = tc.path, tc.method
		if got := r.Matches(req, tc.host, tc.plan); got != tc.want {
			t.Errorf("%+v: %v", tc, got)
		}
	}
}

func TestCompileTooMany(t *testing.T) {
	cfg := config.Default()
	for i := range MaxPolicies + 1 {
		cfg.Policies = append(cfg.Policies, config.Policy{Name: "p" + strings.Repeat("x", i), Quota: 1, Window: time.Minute})
	}
	if _, err := Compile(cfg, nil); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("65 policies: %v", err)
	}
}
