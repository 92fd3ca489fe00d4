package acme

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer collects log lines from the manager's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestOutageLoggedOnce: certmagic reports every failed attempt; the operator is told
// once per outage of a domain (at Error), each attempt is counted, the end of the
// outage is told once, and a second outage is told again.
func TestOutageLoggedOnce(t *testing.T) {
	var buf lockedBuffer
	var counted int
	m, err := New(Config{
		Domains: []string{"api.example.com"}, CA: "https://127.0.0.1:1/dir", Challenges: []string{TLSALPN01},
		Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&buf, nil)), OnError: func() { counted++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fail := map[string]any{"identifier": "api.example.com", "renewal": true, "error": errors.New("connection refused")}
	ok := map[string]any{"identifier": "api.example.com", "renewal": true}
	steps := []struct {
		event              string
		data               map[string]any
		errorLines, counts int
	}{
		{"cert_failed", fail, 1, 1},
		{"cert_failed", fail, 1, 2},
		{"cert_failed", fail, 1, 3},
		{"cert_obtained", ok, 1, 3},
		{"cert_failed", fail, 2, 4},
	}
	for i, st := range steps {
		m.out.onEvent(context.Background(), st.event, st.data)
		if n := strings.Count(buf.String(), "level=ERROR"); n != st.errorLines {
			t.Fatalf("step %d: %d error lines, want %d:\n%s", i, n, st.errorLines, buf.String())
		}
		if counted != st.counts || m.Errors() != uint64(st.counts) {
			t.Fatalf("step %d: counted %d (Errors %d), want %d", i, counted, m.Errors(), st.counts)
		}
	}
	if !strings.Contains(buf.String(), `msg="ACME works again" component=acme domain=api.example.com failed_attempts=3`) {
		t.Fatalf("the end of the outage is not told:\n%s", buf.String())
	}
}
