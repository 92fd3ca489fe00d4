package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TestSwapHandler: loggers made before a swap, with attributes and groups, write in
// the new format after it, keeping their attributes and groups; concurrent logging
// across the swap loses no line.
func TestSwapHandler(t *testing.T) {
	var buf syncBuffer
	h := newSwapHandler(newLogHandler("text", &buf))
	log := slog.New(h)
	edge := log.With("component", "edge").WithGroup("req").With("id", 7)
	edge.Info("before")
	h.swap(newLogHandler("json", &buf))
	edge.Info("after", "n", 1)
	log.Info("root")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "msg=before component=edge req.id=7") {
		t.Fatalf("text line %q", lines)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &got); err != nil {
		t.Fatalf("after the swap: %q is not JSON: %v", lines[1], err)
	}
	req, _ := got["req"].(map[string]any)
	if got["msg"] != "after" || got["component"] != "edge" || req["id"] != 7.0 || req["n"] != 1.0 {
		t.Errorf("after the swap: %q, want component, req.id and req.n kept", lines[1])
	}
	if !strings.HasPrefix(lines[2], "{") {
		t.Errorf("root logger after the swap: %q", lines[2])
	}

	buf.Reset()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				edge.Info("x")
			}
		})
	}
	for i := range 50 {
		h.swap(newLogHandler([]string{"text", "json"}[i%2], &buf))
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "\n"); n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *syncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}
