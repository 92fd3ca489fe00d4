package edge

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter"
)

// opsEdge is a test edge started as production starts one: Listen binds its admin
// listener, which serves the server's own registry and metrics, its chain counts the
// requests, and the ban endpoints reach its penalty box through bans.Admin.
type opsEdge struct {
	*testEdge
	adminURL string // http://127.0.0.1:PORT, the listener Listen started
	token    string
}

// opsConfig is the test configuration: startEdge's, changed by mutate, with the admin
// listener on a free loopback port, validated.
func opsConfig(t testing.TB, mutate func(*config.Config), token string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.IP = roomyIP
	cfg.Admin = config.AdminConfig{Listen: "127.0.0.1:0", Token: token}
	if mutate != nil {
		mutate(cfg)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// startOps starts an edge as startEdge does and returns it with a client for the admin
// listener that Listen started. load, if not nil, is the edge's Options.Load (what a
// reload reads). When the edge is closed, the admin listener must be closed too and
// must not have failed.
func startOps(t testing.TB, mutate func(*config.Config), token string, load func() (*config.Config, error)) *opsEdge {
	t.Helper()
	cfg := opsConfig(t, mutate, token)
	var h slog.Handler = slog.DiscardHandler
	if testing.Verbose() {
		h = slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	failed := &noteHandler{Handler: h, msg: "admin listener failed", seen: new(atomic.Pointer[string])}
	s, err := New(cfg, Options{Logger: slog.New(failed), CertCacheDir: certCache(t), Load: load})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	adminAddr := s.AdminAddr().String()
	e := &opsEdge{
		testEdge: &testEdge{Server: s, port: s.Addr().Port, done: make(chan error, 1)},
		token:    token, adminURL: "http://" + adminAddr,
	}
	e.url = fmt.Sprintf("https://127.0.0.1:%d", e.port)
	go func() { e.done <- s.Serve() }()
	t.Cleanup(func() {
		s.Close()
		if err := <-e.done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		if msg := failed.seen.Load(); msg != nil {
			t.Errorf("admin serve: %s", *msg)
		}
		if c, err := net.DialTimeout("tcp", adminAddr, time.Second); err == nil {
			c.Close()
			t.Errorf("the admin listener %s still accepts after Close", adminAddr)
		}
	})
	return e
}

// noteHandler passes records on to Handler and keeps, in seen, the error of the last
// one whose message is msg, at any level.
type noteHandler struct {
	slog.Handler
	msg  string
	seen *atomic.Pointer[string]
}

// Enabled implements slog.Handler: every level, so that msg is seen under a discarding
// Handler too.
func (h *noteHandler) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *noteHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		note := r.Message
		r.Attrs(func(a slog.Attr) bool {
			note += " " + a.String()
			return true
		})
		h.seen.Store(&note)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *noteHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &noteHandler{Handler: h.Handler.WithAttrs(as), msg: h.msg, seen: h.seen}
}

// WithGroup implements slog.Handler.
func (h *noteHandler) WithGroup(name string) slog.Handler {
	return &noteHandler{Handler: h.Handler.WithGroup(name), msg: h.msg, seen: h.seen}
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
		{"/api/v1/bans", 401, 200},
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
// reachable from other machines needs a token, and admin.Listen refuses it as a last
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
		cfg := config.Default()
		cfg.Admin = config.AdminConfig{Listen: tc.listen, Token: tc.token}
		err := cfg.Validate()
		var ve config.ValidationError
		errors.As(err, &ve)
		got := slices.ContainsFunc(ve, func(fe config.FieldError) bool { return fe.Path == "admin.token" })
		if got != tc.refused {
			t.Errorf("admin %q token %q: refused %v, want %v (%v)", tc.listen, tc.token, got, tc.refused, err)
		}
	}
	if _, err := admin.Listen(config.AdminConfig{Listen: "0.0.0.0:0"}, http.NotFoundHandler(), nil); !errors.Is(err, admin.ErrExposed) {
		t.Errorf("admin.Listen on 0.0.0.0 without a token: %v, want admin.ErrExposed", err)
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
	e := startOps(t, func(c *config.Config) { c.Keys = &config.KeysConfig{Secret: "hash-secret"} }, "admin-secret", nil)
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
		cfg *config.Config
		err error
	}
	e := startOps(t, withPolicies(config.Policy{Name: "burst", Quota: 100, Window: time.Minute}), "", func() (*config.Config, error) {
		next.Lock()
		defer next.Unlock()
		return next.cfg, next.err
	})

	next.cfg = opsConfig(t, withPolicies(config.Policy{Name: "burst", Quota: 100, Window: time.Minute},
		config.Policy{Name: "daily", Quota: 1000, Window: 24 * time.Hour}), "")
	code, _, body := e.call(t, "POST", "/api/v1/reload", nil)
	var sum struct {
		Status   string
		Policies []string
	}
	json.Unmarshal(body, &sum)
	if code != 200 || sum.Status != "reloaded" || !slices.Equal(sum.Policies, []string{"burst", "daily"}) {
		t.Fatalf("valid reload: %d %s", code, body)
	}

	bad := config.Default()
	bad.Policies = []config.Policy{{Name: "x", Quota: -1}}
	bad.ApplyDefaults()
	next.cfg, next.err = nil, bad.Validate()
	code, h, body := e.call(t, "POST", "/api/v1/reload", nil)
	var p struct {
		Status int
		Errors []string
	}
	json.Unmarshal(body, &p)
	if code != http.StatusUnprocessableEntity || h.Get("Content-Type") != "application/problem+json" ||
		p.Status != 422 || len(p.Errors) < 2 || !strings.Contains(strings.Join(p.Errors, "\n"), "policies[0]") {
		t.Fatalf("invalid reload: %d %s", code, body)
	}
	t.Logf("422: %s", body)
	if got := len(e.rules.Load().Policies); got != 2 {
		t.Errorf("after the refused reload %d policies are in force, want the 2 of before", got)
	}
	resp, err := clientFor(t, "h2").Get(e.url + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the old configuration stopped serving: %v", err)
	}
	resp.Body.Close()
}

// TestAdminBans: list, ban and unban through the API, against the server's penalty
// box (bans.Admin): what the API sets is what the box enforces.
func TestAdminBans(t *testing.T) {
	e := startOps(t, nil, "tok", nil)
	if code, _, body := e.call(t, "GET", "/api/v1/bans", nil); code != 200 || !strings.Contains(string(body), `"bans": []`) {
		t.Errorf("GET /api/v1/bans with no ban: %d %s, want 200 and an empty list", code, body)
	}

	json1 := []string{"Content-Type", "application/json"}
	before := time.Now()
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
	after := time.Now()
	for addr, want := range map[string]bool{"203.0.113.200": true, "203.0.114.1": false, "2001:db8::1": true, "2001:db8::2": false} {
		if got := e.box.Banned(netip.MustParseAddr(addr)); got != want {
			t.Errorf("after the POSTs the penalty box bans %s: %v, want %v", addr, got, want)
		}
	}
	code, _, body := e.call(t, "GET", "/api/v1/bans", nil)
	var list struct{ Bans []admin.Ban }
	json.Unmarshal(body, &list)
	if code != 200 || len(list.Bans) != 2 || list.Bans[0].Prefix.String() != "203.0.113.0/24" ||
		list.Bans[0].Reason != "scraper" || list.Bans[1].Prefix.String() != "2001:db8::1/128" || list.Bans[1].Reason != "manual" {
		t.Fatalf("GET /api/v1/bans: %d %s", code, body)
	}
	// The box's own record: the durations asked for (abuse.ban when none), a first ban.
	for i, d := range []time.Duration{10 * time.Minute, e.Config().Abuse.Ban} {
		b := list.Bans[i]
		if b.Until.Before(before.Add(d)) || b.Until.After(after.Add(d)) || b.Strikes != 1 {
			t.Errorf("ban %s: until %v, strikes %d; want until now+%v, strikes 1", b.Prefix, b.Until, b.Strikes, d)
		}
	}

	if code, _, _ := e.call(t, "DELETE", "/api/v1/bans/203.0.113.0/24", nil); code != 204 {
		t.Errorf("DELETE 203.0.113.0/24: %d, want 204", code)
	}
	if e.box.Banned(netip.MustParseAddr("203.0.113.200")) {
		t.Error("203.0.113.0/24 is still banned after its DELETE")
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
	if bans := e.box.List(time.Now()); len(bans) != 0 {
		t.Errorf("bans left in the penalty box: %v", bans)
	}
}

// TestAdminTopParam: n is bounded.
func TestAdminTopParam(t *testing.T) {
	e := startOps(t, nil, "", nil)
	for i := range 30 {
		for range 30 - i {
			e.metrics.ObserveKey(zipfKey(uint64(i)))
		}
	}
	for _, tc := range []struct {
		q    string
		code int
		keys int
	}{{"", 200, 20}, {"?n=3", 200, 3}, {"?n=0", 400, 0}, {"?n=5000", 400, 0}, {"?n=x", 400, 0}} {
		code, _, body := e.call(t, "GET", "/api/v1/top"+tc.q, nil)
		var b struct{ Keys []struct{} }
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
	// The handler Listen serves on the admin listener, called directly: before Listen
	// and after Close there is no listener to ask.
	h := s.adminHandler()
	readyz := func() (int, admin.Readiness) {
		req, _ := http.NewRequest("GET", "http://127.0.0.1/readyz", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var rd admin.Readiness
		json.Unmarshal(rec.Body.Bytes(), &rd)
		return rec.Code, rd
	}
	if code, rd := readyz(); code != 503 || rd.Listeners != "down" {
		t.Errorf("before Listen: %d %+v", code, rd)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	if code, rd := readyz(); code != 200 || rd != (admin.Readiness{Status: "ready", Listeners: "up", Store: "local"}) {
		t.Errorf("listening: %d %+v", code, rd)
	}
	s.Close()
	if code, rd := readyz(); code != 503 || rd.Listeners != "shutting_down" {
		t.Errorf("after Close: %d %+v", code, rd)
	}
}

// TestTopZipf feeds 1,000,000 requests of 100,000 client keys in a zipf distribution
// through the hook decide feeds (metrics.observeKey) and reads the 5 heaviest back
// through the edge's admin listener: they are named in order, each count bounds the
// true one, and the sketch's memory does not grow with the keys.
func TestTopZipf(t *testing.T) {
	const keys, stream = 100_000, 1_000_000
	e := startOps(t, nil, "", nil)
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, keys-1)
	truth := make([]uint64, keys)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range stream {
		i := z.Uint64()
		truth[i]++
		e.metrics.ObserveKey(zipfKey(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// truth itself is allocated before `before`; what grew is the sketch's own doing
	// (and the idle server's, which allocates little).
	t.Logf("heap growth over %d requests of %d keys: %d bytes", stream, keys, int64(after.HeapAlloc)-int64(before.HeapAlloc))
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 256<<10 {
		t.Errorf("heap grew by %d bytes while observing; the sketch must not grow", grew)
	}

	code, _, body := e.call(t, "GET", "/api/v1/top?n=5", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/top: %d %s", code, body)
	}
	var top struct {
		Keys []struct {
			Key          string
			Count, Error uint64
		}
	}
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Keys) != 5 {
		t.Fatalf("got %d keys, want 5", len(top.Keys))
	}
	order := make([]int, keys)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(truth[b]) - int(truth[a]) })
	for rank, got := range top.Keys {
		k := zipfKey(uint64(order[rank]))
		if got.Key != hex.EncodeToString(k[:]) {
			t.Errorf("rank %d: got key %s…, want rank %d's", rank, got.Key[:8], order[rank])
			continue
		}
		c := truth[order[rank]]
		if got.Count < c || got.Count-got.Error > c {
			t.Errorf("rank %d: count %d ± %d does not bound the true %d", rank, got.Count, got.Error, c)
		}
		t.Logf("rank %d: true %d, estimated %d (error ≤ %d)", rank, c, got.Count, got.Error)
	}
}

// zipfKey is the client key of rank i (0 heaviest) in the zipf tests.
func zipfKey(i uint64) limiter.Key {
	var k limiter.Key
	binary.LittleEndian.PutUint64(k[:], i*0x9e3779b97f4a7c15)
	binary.LittleEndian.PutUint64(k[8:], (i+1)*0xc2b2ae3d27d4eb4f)
	return k
}
