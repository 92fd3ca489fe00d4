package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// opsEdge is a test edge with its metrics and admin listener running.
type opsEdge struct {
	*testEdge
	reg      *prometheus.Registry
	m        *metrics
	admin    *adminServer
	adminURL string // http://127.0.0.1:PORT
	token    string
}

// opsConfig is the test configuration: startEdge's, changed by mutate, validated, with
// the admin listener on a free loopback port.
func opsConfig(t testing.TB, mutate func(*Config), token string) *Config {
	t.Helper()
	cfg := Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.IP = roomyIP
	if mutate != nil {
		mutate(cfg)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	// Set after Validate: this build still lists admin among the keys it refuses.
	cfg.Admin = AdminConfig{Listen: "127.0.0.1:0", Token: token}
	return cfg
}

// startOps starts an edge as startEdge does, plus its metrics and admin listener.
// load, if not nil, is the edge's Options.Load (what a reload reads).
func startOps(t testing.TB, mutate func(*Config), token string, load func() (*Config, error)) *opsEdge {
	t.Helper()
	cfg := opsConfig(t, mutate, token)
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := New(cfg, Options{Logger: log, CertCacheDir: certCache(t), Load: load})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, s)
	if err != nil {
		t.Fatal(err)
	}
	// Test wiring: in production chain() places instrument inside streamBudget.
	s.handler = m.instrument(s.handler)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	adm, err := startAdmin(cfg.Admin, s.adminHandler(reg, m), log)
	if err != nil {
		t.Fatal(err)
	}
	e := &opsEdge{
		testEdge: &testEdge{Server: s, port: s.Addr().Port, done: make(chan error, 1)},
		reg:      reg, m: m, admin: adm, token: token,
		adminURL: "http://" + adm.addr().String(),
	}
	e.url = fmt.Sprintf("https://127.0.0.1:%d", e.port)
	adminDone := make(chan error, 1)
	go func() { e.done <- s.Serve() }()
	go func() { adminDone <- adm.serve() }()
	t.Cleanup(func() {
		adm.close()
		s.Close()
		if err := <-e.done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		if err := <-adminDone; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("admin serve: %v", err)
		}
	})
	return e
}

// call sends an admin request with the edge's token and returns the status and body.
func (e *opsEdge) call(t testing.TB, method, path string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.adminURL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

var adminClient = &http.Client{Timeout: 10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// fakeBans is a banList until the penalty box exists.
type fakeBans struct {
	mu     sync.Mutex
	bans   []adminBan
	lifted []netip.Prefix
	total  uint64
}

// List implements banList.
func (f *fakeBans) List(now time.Time) []adminBan {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.bans)
}

// Add implements banList.
func (f *fakeBans) Add(_ context.Context, p netip.Prefix, now time.Time, d time.Duration, reason string) (adminBan, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := adminBan{Prefix: p, Since: now, Until: now.Add(d), Reason: reason, Strikes: 1}
	f.bans = append(f.bans, b)
	f.total++
	return b, nil
}

// Lift implements banList.
func (f *fakeBans) Lift(_ context.Context, p netip.Prefix) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.bans, func(b adminBan) bool { return b.Prefix == p })
	if i < 0 {
		return false, nil
	}
	f.bans = slices.Delete(f.bans, i, i+1)
	f.lifted = append(f.lifted, p)
	return true, nil
}

// Counts implements banCounter.
func (f *fakeBans) Counts() (int, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bans), f.total
}

// liftedAny reports whether p was lifted.
func (f *fakeBans) liftedAny(p netip.Prefix) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.lifted, p)
}

// TestAdminToken: with admin.token set, every endpoint but health and the dashboard's
// files wants it; a wrong or missing token gets 401.
func TestAdminToken(t *testing.T) {
	e := startOps(t, nil, "s3cret-token", nil)
	anon := &opsEdge{testEdge: e.testEdge, adminURL: e.adminURL}
	wrong := &opsEdge{testEdge: e.testEdge, adminURL: e.adminURL, token: "s3cret-tokeN"}
	for _, tc := range []struct {
		path       string
		anon, good int
	}{
		{"/metrics", 401, 200},
		{"/api/v1/config", 401, 200},
		{"/api/v1/stats", 401, 200},
		{"/api/v1/top", 401, 200},
		{"/api/v1/bans", 401, 501},
		{"/healthz", 200, 200},
		{"/readyz", 200, 200},
		{"/ui/", 200, 200},
		{"/ui/app.js", 200, 200},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			code, h, _ := anon.call(t, "GET", tc.path, nil)
			if code != tc.anon {
				t.Errorf("without token: %d, want %d", code, tc.anon)
			}
			if code == 401 && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without WWW-Authenticate: Bearer")
			}
			if code, _, _ := wrong.call(t, "GET", tc.path, nil); code != tc.anon {
				t.Errorf("wrong token: %d, want %d", code, tc.anon)
			}
			if code, _, _ := e.call(t, "GET", tc.path, nil); code != tc.good {
				t.Errorf("with token: %d, want %d", code, tc.good)
			}
		})
	}
	// A dashboard path that climbs out of /ui/ is redirected, not served without the token.
	if code, _, body := anon.call(t, "GET", "/ui/../api/v1/stats", nil); code == 200 {
		t.Errorf("/ui/../api/v1/stats without token: 200 %.100s", body)
	}
	if code, _, _ := anon.call(t, "POST", "/api/v1/reload", nil); code != 401 {
		t.Errorf("POST /api/v1/reload without token: %d, want 401", code)
	}
}

// TestAdminLoopbackOnly: without a token, only loopback host names are answered (no
// DNS rebinding), and no other origin may change state.
func TestAdminLoopbackOnly(t *testing.T) {
	e := startOps(t, nil, "", nil)
	for _, tc := range []struct {
		host string
		want int
	}{
		{"", 200}, // the listener's own address
		{"localhost:9090", 200},
		{"[::1]:9090", 200},
		{"rebound.example:9090", 421},
		{"10.0.0.1", 421},
	} {
		var hdr []string
		if tc.host != "" {
			hdr = []string{"Host", tc.host}
		}
		if code, _, _ := e.call(t, "GET", "/api/v1/config", nil, hdr...); code != tc.want {
			t.Errorf("Host %q: %d, want %d", tc.host, code, tc.want)
		}
	}
	code, _, body := e.call(t, "POST", "/api/v1/reload", nil, "Sec-Fetch-Site", "cross-site")
	if code != http.StatusForbidden {
		t.Errorf("cross-site POST /api/v1/reload: %d %s, want 403", code, body)
	}
	code, _, body = e.call(t, "DELETE", "/api/v1/bans/203.0.113.0/24", nil, "Origin", "https://evil.example")
	if code != http.StatusForbidden {
		t.Errorf("cross-origin DELETE: %d %s, want 403", code, body)
	}
}

// TestAdminValidateRefusesExposed proves through Config.Validate that an admin address
// reachable from other machines needs a token, and startAdmin refuses it as a last
// guard.
func TestAdminValidateRefusesExposed(t *testing.T) {
	for _, tc := range []struct {
		listen, token string
		refused       bool
	}{
		{"0.0.0.0:9090", "", true},
		{":9090", "", true},
		{"192.0.2.10:9090", "", true},
		{"[::]:9090", "", true},
		{"0.0.0.0:9090", "long-random-token", false},
		{"127.0.0.1:9090", "", false},
		{"[::1]:9090", "", false},
		{"localhost:9090", "", false},
		{"off", "", false},
	} {
		cfg := Default()
		cfg.Admin = AdminConfig{Listen: tc.listen, Token: tc.token}
		err := cfg.Validate()
		var ve ValidationError
		errors.As(err, &ve)
		got := slices.ContainsFunc(ve, func(fe FieldError) bool { return fe.Path == "admin.token" })
		if got != tc.refused {
			t.Errorf("admin %q token %q: refused %v, want %v (%v)", tc.listen, tc.token, got, tc.refused, err)
		}
	}
	if _, err := startAdmin(AdminConfig{Listen: "0.0.0.0:0"}, http.NotFoundHandler(), nil); !errors.Is(err, errAdminExposed) {
		t.Errorf("startAdmin on 0.0.0.0 without a token: %v, want errAdminExposed", err)
	}
}

// TestAdminNotOnPublicPort: the admin paths on the public listener reach the demo
// origin, never the admin API, on every protocol.
func TestAdminNotOnPublicPort(t *testing.T) {
	e := startOps(t, nil, "", nil)
	for _, p := range protos {
		c := clientFor(t, p.name)
		for _, path := range []string{"/metrics", "/api/v1/config", "/api/v1/stats", "/api/v1/bans", "/ui/", "/healthz"} {
			resp, err := c.Get(e.url + path)
			if err != nil {
				t.Fatalf("%s %s: %v", p.name, path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var echo struct {
				Path string `json:"path"`
			}
			json.Unmarshal(body, &echo)
			if resp.StatusCode != 200 || echo.Path != path || strings.Contains(string(body), "h3edge_") ||
				strings.Contains(string(body), "admin") {
				t.Errorf("%s GET %s on the public port: %d %.200s; want the demo origin's echo", p.name, path, resp.StatusCode, body)
			}
		}
	}
}

// TestAdminConfigRedacted: the effective configuration, keyed as in the file, without
// its secrets.
func TestAdminConfigRedacted(t *testing.T) {
	e := startOps(t, func(c *Config) { c.Keys = &KeysConfig{Secret: "hash-secret"} }, "admin-secret", nil)
	code, h, body := e.call(t, "GET", "/api/v1/config", nil)
	if code != 200 || h.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /api/v1/config: %d %s", code, h.Get("Content-Type"))
	}
	if strings.Contains(string(body), "hash-secret") || strings.Contains(string(body), "admin-secret") {
		t.Errorf("a secret leaked: %s", body)
	}
	var cfg struct {
		Listen          string `json:"listen"`
		ShutdownTimeout string `json:"shutdown_timeout"`
		Admin           struct{ Token string }
		Keys            struct{ Secret string }
	}
	if err := json.Unmarshal(body, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:0" || cfg.ShutdownTimeout != "10s" || cfg.Admin.Token != "REDACTED" || cfg.Keys.Secret != "REDACTED" {
		t.Errorf("config: %+v", cfg)
	}
	if code, h, body := e.call(t, "GET", "/api/v1/config?format=yaml", nil); code != 200 ||
		h.Get("Content-Type") != "application/yaml" || !strings.Contains(string(body), "token: REDACTED") {
		t.Errorf("YAML: %d %s %s", code, h.Get("Content-Type"), body)
	}
}

// TestAdminReload: a valid configuration is applied (200 and a summary); an invalid one
// answers 422 with every problem and the old configuration keeps serving.
func TestAdminReload(t *testing.T) {
	var next struct {
		sync.Mutex
		cfg *Config
		err error
	}
	e := startOps(t, withPolicies(Policy{Name: "burst", Quota: 100, Window: time.Minute}), "", func() (*Config, error) {
		next.Lock()
		defer next.Unlock()
		return next.cfg, next.err
	})

	next.cfg = opsConfig(t, withPolicies(Policy{Name: "burst", Quota: 100, Window: time.Minute},
		Policy{Name: "daily", Quota: 1000, Window: 24 * time.Hour}), "")
	code, _, body := e.call(t, "POST", "/api/v1/reload", nil)
	var sum reloadSummary
	json.Unmarshal(body, &sum)
	if code != 200 || sum.Status != "reloaded" || !slices.Equal(sum.Policies, []string{"burst", "daily"}) {
		t.Fatalf("valid reload: %d %s", code, body)
	}

	bad := Default()
	bad.Policies = []Policy{{Name: "x", Quota: -1}}
	bad.ApplyDefaults()
	next.cfg, next.err = nil, bad.Validate()
	code, h, body := e.call(t, "POST", "/api/v1/reload", nil)
	var p adminProblem
	json.Unmarshal(body, &p)
	if code != http.StatusUnprocessableEntity || h.Get("Content-Type") != "application/problem+json" ||
		p.Status != 422 || len(p.Errors) < 2 || !strings.Contains(strings.Join(p.Errors, "\n"), "policies[0]") {
		t.Fatalf("invalid reload: %d %s", code, body)
	}
	t.Logf("422: %s", body)
	if got := len(e.rules.Load().policies); got != 2 {
		t.Errorf("after the refused reload %d policies are in force, want the 2 of before", got)
	}
	resp, err := clientFor(t, "h2").Get(e.url + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the old configuration stopped serving: %v", err)
	}
	resp.Body.Close()
}

// TestAdminBans: 501 without a penalty box; with one, list, ban and unban.
func TestAdminBans(t *testing.T) {
	e := startOps(t, nil, "tok", nil)
	for _, r := range []struct{ method, path string }{
		{"GET", "/api/v1/bans"}, {"POST", "/api/v1/bans"}, {"DELETE", "/api/v1/bans/192.0.2.1"},
	} {
		if code, h, _ := e.call(t, r.method, r.path, strings.NewReader(`{}`), "Content-Type", "application/json"); code != 501 ||
			h.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s without a penalty box: %d", r.method, r.path, code)
		}
	}

	fb := &fakeBans{}
	e.m.bans = fb
	json1 := []string{"Content-Type", "application/json"}
	for _, tc := range []struct {
		body string
		hdr  []string
		want int
	}{
		{`{"prefix":"203.0.113.0/24","duration":"10m"}`, []string{"Content-Type", "text/plain"}, 415},
		{`{"prefix":"203.0.113.0/33"}`, json1, 400},
		{`{"prefix":"203.0.113.0/24","duration":"-1m"}`, json1, 400},
		{`{"prefix":"203.0.113.0/24","duration":"10000h"}`, json1, 400},
		{`{"prefix":"203.0.113.0/24","extra":1}`, json1, 400},
		{`{"prefix":"203.0.113.7/24","duration":"10m","reason":"scraper"}`, json1, 201},
		{`{"prefix":"2001:db8::1"}`, json1, 201},
	} {
		code, h, body := e.call(t, "POST", "/api/v1/bans", strings.NewReader(tc.body), tc.hdr...)
		if code != tc.want {
			t.Errorf("POST %s: %d %s, want %d", tc.body, code, body, tc.want)
		}
		if code == 201 && !strings.HasPrefix(h.Get("Location"), "/api/v1/bans/") {
			t.Errorf("201 without Location: %v", h)
		}
	}
	code, _, body := e.call(t, "GET", "/api/v1/bans", nil)
	var list banListBody
	json.Unmarshal(body, &list)
	if code != 200 || len(list.Bans) != 2 || list.Bans[0].Prefix.String() != "203.0.113.0/24" ||
		list.Bans[0].Reason != "scraper" || list.Bans[1].Prefix.String() != "2001:db8::1/128" || list.Bans[1].Reason != "manual" {
		t.Fatalf("GET /api/v1/bans: %d %s", code, body)
	}
	if code, _, _ := e.call(t, "DELETE", "/api/v1/bans/203.0.113.0/24", nil); code != 204 {
		t.Errorf("DELETE 203.0.113.0/24: %d, want 204", code)
	}
	if code, _, _ := e.call(t, "DELETE", "/api/v1/bans/203.0.113.0%2F24", nil); code != 404 {
		t.Errorf("DELETE again: %d, want 404", code)
	}
	if code, _, _ := e.call(t, "DELETE", "/api/v1/bans/2001:db8::1", nil); code != 204 {
		t.Errorf("DELETE 2001:db8::1: %d, want 204", code)
	}
	if code, _, _ := e.call(t, "DELETE", "/api/v1/bans/not-a-prefix", nil); code != 400 {
		t.Errorf("DELETE not-a-prefix: %d, want 400", code)
	}
}

// TestAdminTopParam: n is bounded.
func TestAdminTopParam(t *testing.T) {
	e := startOps(t, nil, "", nil)
	for i := range 30 {
		for range 30 - i {
			e.m.observeKey(zipfKey(uint64(i)))
		}
	}
	for _, tc := range []struct {
		q    string
		code int
		keys int
	}{{"", 200, 20}, {"?n=3", 200, 3}, {"?n=0", 400, 0}, {"?n=5000", 400, 0}, {"?n=x", 400, 0}} {
		code, _, body := e.call(t, "GET", "/api/v1/top"+tc.q, nil)
		var b topBody
		json.Unmarshal(body, &b)
		if code != tc.code || len(b.Keys) != tc.keys {
			t.Errorf("GET /api/v1/top%s: %d with %d keys, want %d with %d", tc.q, code, len(b.Keys), tc.code, tc.keys)
		}
	}
}

// TestAdminReadyz follows a server's life: not listening, ready, shutting down.
func TestAdminReadyz(t *testing.T) {
	s, err := New(opsConfig(t, nil, ""), Options{Logger: slog.New(slog.DiscardHandler), CertCacheDir: certCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, s)
	if err != nil {
		t.Fatal(err)
	}
	h := s.adminHandler(reg, m)
	readyz := func() (int, readiness) {
		req, _ := http.NewRequest("GET", "http://127.0.0.1/readyz", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var rd readiness
		json.Unmarshal(rec.Body.Bytes(), &rd)
		return rec.Code, rd
	}
	if code, rd := readyz(); code != 503 || rd.Listeners != "down" {
		t.Errorf("before Listen: %d %+v", code, rd)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	if code, rd := readyz(); code != 200 || rd != (readiness{Status: "ready", Listeners: "up", Store: "local"}) {
		t.Errorf("listening: %d %+v", code, rd)
	}
	s.Close()
	if code, rd := readyz(); code != 503 || rd.Listeners != "shutting_down" {
		t.Errorf("after Close: %d %+v", code, rd)
	}
}

// TestAdminServerLifecycle: serve returns http.ErrServerClosed after shutdown, also
// when shutdown came first; "off" is a nil server that does nothing.
func TestAdminServerLifecycle(t *testing.T) {
	a, err := startAdmin(AdminConfig{Listen: "127.0.0.1:0"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("up"))
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.serve() }()
	resp, err := adminClient.Get("http://" + a.addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve after shutdown: %v", err)
	}

	b, err := startAdmin(AdminConfig{Listen: "127.0.0.1:0"}, http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.shutdown(ctx)
	if err := b.serve(); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve after an early shutdown: %v", err)
	}

	off, err := startAdmin(AdminConfig{Listen: "off"}, http.NotFoundHandler(), nil)
	if off != nil || err != nil {
		t.Fatalf("off: %v %v", off, err)
	}
	if err := off.serve(); !errors.Is(err, http.ErrServerClosed) || off.addr() != nil || off.shutdown(ctx) != nil || off.close() != nil {
		t.Errorf("a nil admin server must do nothing")
	}
}
