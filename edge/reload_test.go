package edge

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// startEdgeFile starts an edge from a configuration file, so reloads re-read it.
func startEdgeFile(t *testing.T, yaml string) (*testEdge, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "h3edge.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var e *testEdge
	e = startEdge(t, func(c *Config) {
		loaded, err := Load(file)
		if err != nil {
			t.Fatal(err)
		}
		*c = *loaded
		c.Listen = "127.0.0.1:0"
	})
	return e, file
}

const reloadBase = `
listen: "127.0.0.1:0"
ip: {streams: {rate: 100000, burst: 100000}, connections: {rate: 100000, burst: 100000}}
policies:
  - {name: keep, key: [ip], quota: 100, window: 1m}
  - {name: change, key: [ip], quota: 5, window: 1m}
`

func TestReloadKeepsUnchangedPolicies(t *testing.T) {
	e, file := startEdgeFile(t, reloadBase)
	c := clientFor(t, "h2")
	for range 3 {
		do(t, c, "GET", e.url+"/", nil, nil)
	}
	keep := e.rules.Load().policies[0].lim

	// Tighten "change" and add a policy: no restart, no dropped connection.
	os.WriteFile(file, []byte(strings.Replace(reloadBase, "quota: 5,", "quota: 2,", 1)+
		"  - {name: added, key: [ip], quota: 50, window: 1m}\n"), 0o644)
	if err := e.reloadConfig(); err != nil {
		t.Fatal(err)
	}
	rs := e.rules.Load()
	if rs.policies[0].lim != keep || keep.Stats().Allowed != 3 {
		t.Errorf("unchanged policy lost its state: %+v", rs.policies[0].lim.Stats())
	}
	resp, _ := do(t, c, "GET", e.url+"/", nil, nil) // same connection
	if r := sfItem(t, resp.Header.Values("RateLimit"), "keep")["r"]; r != int64(96) {
		t.Errorf("keep r=%v after reload, want 96: its count carried over", r)
	}
	if q := sfItem(t, resp.Header.Values("RateLimit-Policy"), "change")["q"]; q != int64(2) {
		t.Errorf("change q=%v, want the new quota 2", q)
	}
	sfItem(t, resp.Header.Values("RateLimit-Policy"), "added")

	// An invalid file is refused with its problems; the old configuration keeps serving.
	os.WriteFile(file, []byte(reloadBase+"  - {name: broken, key: [ip], quota: -1, window: 1m}\n"), 0o644)
	err := e.reloadConfig()
	var ve ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "policies[2].quota") {
		t.Fatalf("invalid reload: %v, want a ValidationError naming policies[2].quota", err)
	}
	resp, _ = do(t, c, "GET", e.url+"/", nil, nil)
	sfItem(t, resp.Header.Values("RateLimit-Policy"), "added")

	// What only a restart can change is refused, naming the field.
	os.WriteFile(file, []byte(strings.Replace(reloadBase, `listen: "127.0.0.1:0"`, `listen: "127.0.0.1:1"`, 1)), 0o644)
	if err := e.reloadConfig(); !errors.Is(err, errRestart) || !strings.Contains(err.Error(), "listen") {
		t.Errorf("changing listen: %v", err)
	}
}
