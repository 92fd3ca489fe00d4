package enforce

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/limiter"
	"github.com/h3edge/h3edge/limiter/redisstore"
)

// enforcer compiles ps (with redis: when global is set, pointing at a port nothing
// listens on: Redis never answers) and builds an Enforcer on a real local store.
// refused collects the policies of every 429.
func enforcer(t *testing.T, global bool, ps ...config.Policy) (e *Enforcer, refused *[][]string) {
	t.Helper()
	cfg := config.Default()
	cfg.Policies = ps
	if global {
		cfg.Redis = &config.RedisConfig{URL: "redis://127.0.0.1:1/0"}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Compile(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	local, err := limiter.NewLocal(limiter.Config{})
	if err != nil {
		t.Fatal(err)
	}
	refused = new([][]string)
	c := Config{
		Rules:  func() *rules.Set { return rs },
		Plans:  func() *identity.Plans { return new(identity.Plans) },
		Hasher: identity.NewHasher([]byte("enforce-test")),
		Local:  local,
		Refused: func(_ *http.Request, _ time.Time, violated []string, _ limiter.Key, _ time.Duration) {
			*refused = append(*refused, violated)
		},
	}
	if global {
		st, err := redisstore.New(redisstore.Config{URL: cfg.Redis.URL, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c.Global = st
	}
	return New(c), refused
}

// serve sends one request through e and reports the answer and whether the origin saw it.
func serve(e *Enforcer, hdr map[string]string) (*httptest.ResponseRecorder, bool) {
	r := httptest.NewRequest("GET", "https://api.example/v1/items", nil)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	reached := false
	e.Serve(w, r, time.Now(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	return w, reached
}

// All enforced policies are decided together: a denial by one charges none, and the
// answer names the one that denied; a shadow policy is decided but never refuses.
func TestServeAllOrNothing(t *testing.T) {
	e, refused := enforcer(t, false,
		config.Policy{Name: "burst", Quota: 2, Window: time.Minute},
		config.Policy{Name: "daily", Quota: 100, Window: time.Hour},
		config.Policy{Name: "tight", Quota: 1, Window: time.Minute, Mode: "shadow"},
	)
	for i := range 2 {
		if w, reached := serve(e, nil); !reached || w.Code != 200 {
			t.Fatalf("request %d: %d, origin reached %v", i+1, w.Code, reached)
		}
	}
	w, reached := serve(e, nil)
	if reached || w.Code != 429 || !slices.Equal((*refused)[0], []string{"burst"}) {
		t.Fatalf("third request: %d, origin reached %v, refused %v; want 429 by burst", w.Code, reached, *refused)
	}
	if lim := w.Header().Get("RateLimit"); !strings.Contains(lim, `"daily";r=98`) || strings.Contains(lim, "tight") {
		t.Errorf("RateLimit %q: daily charged by the refusal, or the shadow policy advertised", lim)
	}
	if w.Header().Get("Retry-After") == "" || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("429 header %v", w.Header())
	}
}

// Concurrency units are held while the origin runs and given back after, counted in Held.
func TestServeHoldsConcurrency(t *testing.T) {
	e, _ := enforcer(t, false, config.Policy{Name: "inflight", Algorithm: "concurrency", Unit: "concurrent-requests", Quota: 1})
	r := httptest.NewRequest("GET", "https://api.example/", nil)
	var inner *httptest.ResponseRecorder
	e.Serve(httptest.NewRecorder(), r, time.Now(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		if n := e.cfg.Held.Get("inflight", false); n != 1 {
			t.Errorf("held while running: %d, want 1", n)
		}
		inner, _ = serve(e, nil)
	}))
	if inner.Code != 429 {
		t.Errorf("second concurrent request: %d, want 429", inner.Code)
	}
	if n := e.cfg.Held.Get("inflight", false); n != 0 {
		t.Errorf("held after the response: %d, want 0", n)
	}
	if w, _ := serve(e, nil); w.Code != 200 {
		t.Errorf("after release: %d, want 200", w.Code)
	}
}

// While Redis cannot decide, each global policy follows on_store_failure: closed
// refuses with 503 naming it, open admits against the local backstop.
func TestServeStoreFailure(t *testing.T) {
	closed, _ := enforcer(t, true, config.Policy{Name: "g", Quota: 5, Window: time.Minute, OnStoreFailure: "closed"})
	w, reached := serve(closed, nil)
	if reached || w.Code != 503 || !strings.Contains(w.Body.String(), "temporary-reduced-capacity") || w.Header().Get("Retry-After") != "1" {
		t.Errorf("closed: %d %s, origin reached %v; want the 503 problem", w.Code, w.Body, reached)
	}
	open, _ := enforcer(t, true, config.Policy{Name: "g", Quota: 1, Window: time.Minute})
	if w, reached := serve(open, nil); !reached || w.Code != 200 {
		t.Errorf("open, first: %d, origin reached %v; want the backstop to admit", w.Code, reached)
	}
	if w, _ := serve(open, nil); w.Code != 429 {
		t.Errorf("open, second: %d; want the backstop's quota of 1 to refuse", w.Code)
	}
}

// A client key that cannot be one is a 400, before any decision.
func TestServeBadKey(t *testing.T) {
	e, _ := enforcer(t, false, config.Policy{Name: "k", Key: []string{"header:X-API-Key"}, Quota: 1, Window: time.Minute})
	if w, reached := serve(e, map[string]string{"X-API-Key": strings.Repeat("k", 257)}); reached || w.Code != 400 {
		t.Errorf("key of 257 bytes: %d, origin reached %v", w.Code, reached)
	}
	// A chain that yields nothing is one anonymous client.
	serve(e, nil)
	if w, _ := serve(e, nil); w.Code != 429 {
		t.Errorf("second anonymous request: %d, want 429", w.Code)
	}
}
