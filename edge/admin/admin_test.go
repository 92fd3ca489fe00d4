package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// The admin API's own behaviour with hooks left nil, and Extra. The edge's tests
// (edge/admin_test.go) cover every endpoint with the hooks the edge fills, on the
// listener Listen starts.

var client = &http.Client{Timeout: 10 * time.Second}

// serve starts h on a loopback admin listener and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	s, err := Listen(config.AdminConfig{Listen: "127.0.0.1:0"}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + s.Addr().String()
}

// do sends one request and returns the status and body.
func do(t *testing.T, method, url, token string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestNilHooks: each hook left nil gives its documented answer, never a panic.
func TestNilHooks(t *testing.T) {
	cfg := config.Default()
	url := serve(t, &Handler{Config: func() *config.Config { return cfg }})
	for _, tc := range []struct {
		method, path string
		want         int
		body         string // a part of the body
	}{
		{"GET", "/api/v1/bans", 501, "no penalty box"},
		{"POST", "/api/v1/bans", 501, "no penalty box"},
		{"DELETE", "/api/v1/bans/192.0.2.1", 501, "no penalty box"},
		{"POST", "/api/v1/reload", 501, "cannot reload"},
		{"GET", "/api/v1/top", 200, `"keys": []`},
		{"GET", "/readyz", 200, `"status": "ready"`},
		{"GET", "/metrics", 200, ""},
		{"GET", "/api/v1/stats", 200, `"available": false`},
	} {
		code, body := do(t, tc.method, url+tc.path, "", `{"prefix":"192.0.2.1"}`)
		if code != tc.want || !strings.Contains(body, tc.body) {
			t.Errorf("%s %s: %d %.300s; want %d with %q", tc.method, tc.path, code, body, tc.want, tc.body)
		}
	}
}

// TestExtra: an endpoint mounted through Extra is served beside the API's own, behind
// the same token.
func TestExtra(t *testing.T) {
	cfg := config.Default()
	cfg.Admin.Token = "extra-token"
	url := serve(t, &Handler{
		Config: func() *config.Config { return cfg },
		Extra: map[string]http.Handler{"GET /api/v1/certificates": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode([]string{"api.example.com"})
		})},
	})
	if code, _ := do(t, "GET", url+"/api/v1/certificates", "", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code, body := do(t, "GET", url+"/api/v1/certificates", "extra-token", ""); code != 200 || !strings.Contains(body, "api.example.com") {
		t.Errorf("with the token: %d %s", code, body)
	}
	if code, _ := do(t, "GET", url+"/api/v1/bans", "extra-token", ""); code != 501 {
		t.Errorf("the API's own endpoints beside it: GET /api/v1/bans %d, want 501", code)
	}
}

// TestServerLifecycle: Serve returns http.ErrServerClosed after shutdown, also
// when Shutdown came first; "off" is a nil server that does nothing.
func TestServerLifecycle(t *testing.T) {
	a, err := Listen(config.AdminConfig{Listen: "127.0.0.1:0"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("up"))
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve() }()
	resp, err := client.Get("http://" + a.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve after shutdown: %v", err)
	}

	b, err := Listen(config.AdminConfig{Listen: "127.0.0.1:0"}, http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Shutdown(ctx)
	if err := b.Serve(); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve after an early shutdown: %v", err)
	}

	off, err := Listen(config.AdminConfig{Listen: "off"}, http.NotFoundHandler(), nil)
	if off != nil || err != nil {
		t.Fatalf("off: %v %v", off, err)
	}
	if err := off.Serve(); !errors.Is(err, http.ErrServerClosed) || off.Addr() != nil || off.Shutdown(ctx) != nil || off.Close() != nil {
		t.Errorf("a nil admin server must do nothing")
	}
}
