package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/h3edge/h3edge/bench/testkit"
)

// TestScanHash: ScanHash walks a hash larger than one HSCAN page whole; an error from
// fn stops the walk and comes back as it is; a missing key is an empty hash; a key of
// another type gives Redis's WRONGTYPE.
func TestScanHash(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := clientOf(t, srv)
	st := newStore(t, Config{URL: srv.URL()})
	ctx := context.Background()
	const n = 2500 // past the listpack encoding (128 fields) and past one page
	for i := range n {
		if err := rc.HSet(ctx, "h", fmt.Sprint("f-", i), fmt.Sprint("v-", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rc.Set(ctx, "s", "not a hash", 0)

	got := map[string]string{}
	if err := st.ScanHash(ctx, "h", func(f, v string) error { got[f] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != n || got["f-2499"] != "v-2499" {
		t.Errorf("%d fields, f-2499 = %q; want %d, v-2499", len(got), got["f-2499"], n)
	}

	stop := errors.New("stop")
	calls := 0
	if err := st.ScanHash(ctx, "h", func(string, string) error { calls++; return stop }); err != stop || calls != 1 {
		t.Errorf("fn failing: %v after %d calls, want stop after 1", err, calls)
	}

	calls = 0
	if err := st.ScanHash(ctx, "missing", func(string, string) error { calls++; return nil }); err != nil || calls != 0 {
		t.Errorf("missing key: %v, %d calls", err, calls)
	}

	if err := st.ScanHash(ctx, "s", func(string, string) error { return nil }); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("a string key: %v, want WRONGTYPE", err)
	}
}
