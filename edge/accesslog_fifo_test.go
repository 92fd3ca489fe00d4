//go:build unix

package edge

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/h3edge/h3edge/edge/config"
)

// TestAccessLogFullDrops: an access log whose file stops taking lines (a FIFO its
// reader does not read) holds no request up: the lines that do not fit are dropped
// and counted in access_log_dropped_total, and every request is answered.
func TestAccessLogFullDrops(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "access.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The reader end, opened first so that the edge's open does not wait for one.
	rd, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := startOps(t, withAccessLog(&config.AccessLogConfig{Path: fifo}, nil), "", nil)
	// Drained before the edge closes, whose Close writes what its log holds; the
	// copy ends when the edge closes its end.
	t.Cleanup(func() {
		go io.Copy(io.Discard, rd)
		e.Close()
		rd.Close()
	})
	c := clientFor(t, "h2")
	dropped := `h3edge_access_log_dropped_total`
	if got := e.scrape(t)[dropped]; got != 0 {
		t.Fatalf("%s = %v before any request", dropped, got)
	}
	// The FIFO holds 64 KiB, the log's buffers 2 MiB: some ten thousand lines of ~200
	// bytes. Requests are sent until the counter moves, every one answered.
	sent := 0
	for ; sent < 100_000; sent++ {
		resp, _ := do(t, c, "GET", e.url+"/", nil, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", sent, resp.StatusCode)
		}
		if sent%500 == 499 && e.scrape(t)[dropped] > 0 {
			break
		}
	}
	got := e.scrape(t)[dropped]
	t.Logf("%d requests answered, %v lines dropped", sent+1, got)
	if got == 0 {
		t.Fatalf("%d requests against a stalled access log and %s is 0", sent+1, dropped)
	}
}
