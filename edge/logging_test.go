package edge

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/h3edge/h3edge/edge/config"
)

// TestLogComponentOnce: each log line names its component once — the certificate
// store's lines say component=certs, not component=edge component=certs.
func TestLogComponentOnce(t *testing.T) {
	var buf syncBuffer
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = ""
	cfg.ApplyDefaults()
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil)), CertCacheDir: certCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logs := buf.String()
	if !strings.Contains(logs, "component=certs") {
		t.Fatalf("no certificate store line logged:\n%s", logs)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if n := strings.Count(line, "component="); n != 1 {
			t.Errorf("%d component attributes in %q", n, line)
		}
	}
}
