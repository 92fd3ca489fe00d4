package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/h3edge/h3edge/bench/testkit"
)

// TestRedisTLS: two edges share one quota through a redis-server that speaks only TLS
// (rediss://), trusting its self-signed certificate through SSL_CERT_FILE; an edge
// that does not trust it cannot decide (the closed policy answers 503), so the
// certificate is verified, not skipped.
func TestRedisTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, der := writePair(t, dir, "127.0.0.1")
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	rd := testkit.StartRedisTLS(t, certFile, keyFile)
	// Up, and trusted through the pool the edges will be given.
	probe, err := tls.Dial("tcp", rd.Addr(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("redis-server's TLS port with its own certificate as root: %v", err)
	}
	probe.Close()

	cfg := filepath.Join(dir, "h3edge.yaml")
	os.WriteFile(cfg, []byte(roomyIP+fmt.Sprintf(`redis: {url: "%s", timeout: 500ms}
keys: {secret: redis-tls-test-secret}
policies:
  - {name: shared, key: ["header:X-API-Key"], quota: 6, window: 1m, on_store_failure: closed}
`, rd.URL())), 0o644)
	trust := []string{"SSL_CERT_FILE=" + certFile}
	a, b := startProc(t, trust, "-config", cfg), startProc(t, trust, "-config", cfg)
	c := client(t, "h2")
	codes := map[int]int{}
	for i := range 12 {
		p := a
		if i%2 == 1 {
			p = b
		}
		codes[get(t, c, p.url+"/", "X-API-Key", "tls-key")]++
	}
	if codes[200] != 6 || codes[429] != 6 {
		t.Errorf("two edges over rediss://: %v, want exactly the quota (6) admitted and 6 denied", codes)
	}

	untrusting := startProc(t, []string{"SSL_CERT_FILE=" + filepath.Join(dir, "none.pem")}, "-config", cfg)
	if code := get(t, c, untrusting.url+"/", "X-API-Key", "tls-key"); code != http.StatusServiceUnavailable {
		t.Errorf("an edge that does not trust Redis's certificate answered %d, want 503 (on_store_failure: closed)", code)
	}
}

// get sends a GET with one header and returns the status.
func get(t testing.TB, c *http.Client, url, name, value string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set(name, value)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
