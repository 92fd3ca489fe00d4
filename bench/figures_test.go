package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestFigures prints informational throughput against the bare in-process servers
// (client and server share the machine, so the figures are only indicative). It runs
// only with H3BENCH_FIGURES=1.
func TestFigures(t *testing.T) {
	if os.Getenv("H3BENCH_FIGURES") == "" {
		t.Skip("set H3BENCH_FIGURES=1 to measure")
	}
	for _, tc := range []struct {
		proto Proto
		c, m  int
	}{
		{H3, 4, 16},
		{H2, 8, 8},
	} {
		rec := newRecorder()
		rec.quiet = true
		url := start(t, tc.proto, rec)
		res := runT(t, Config{URL: url, Proto: tc.proto, Connections: tc.c, Streams: tc.m,
			Duration: 3 * time.Second, Warmup: time.Second})
		var b strings.Builder
		res.WriteText(&b)
		t.Logf("\n%s", b.String())
	}
}
