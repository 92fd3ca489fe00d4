package edge

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// chromium finds Debian's chromium (or another Chromium build). Missing, the test
// fails under CI=true and is skipped elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testkit.Require(t, "chromium (apt-get install -y chromium)", false)
	return ""
}

// artifactDir is where screenshots are kept: $ARTIFACTS_DIR if set, else a test
// temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("ARTIFACTS_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// screenshot keeps a full-page screenshot of the page as the artifact name.
func screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifactDir(t), name)
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}

// startChromium starts headless Chromium (bin) for the test, with a scratch profile
// and home, no traffic beyond loopback, and extra flags; its context ends after 90 s.
func startChromium(t *testing.T, bin string, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	scratch := t.TempDir()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), append(append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"),
		chromedp.UserDataDir(filepath.Join(scratch, "profile")),
		chromedp.WindowSize(1280, 1400),
		chromedp.Env("HOME="+scratch, "TMPDIR="+scratch),
	), extra...)...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}

// pollPage waits up to 15 s for the JavaScript expression js to hold in the page,
// failing the test with the page's main element if it does not.
func pollPage(ctx context.Context, t *testing.T, what, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		dom, _ := chromedp.Run(ctx, chromedp.OuterHTML("body"))
		t.Fatalf("%s: %v\n%.3000s", what, err, dom)
	}
}

// TestDashboardInChromium loads /ui in headless Chromium: the page shows data, its
// numbers move under load, and the unban button lifts a ban through the API. A
// screenshot is kept as an artifact.
func TestDashboardInChromium(t *testing.T) {
	bin := chromium(t)
	if testing.Short() && !testkit.InCI() {
		t.Skip("starts a browser")
	}
	const token = "dashboard-test-token"
	e := startOps(t, withPolicies(
		// An hour, so that no unit comes back while the 45 requests are made (a minute's
		// token bucket refilled one every 1.5 s, and a slow run saw 41 admitted).
		config.Policy{Name: "burst", Quota: 40, Window: time.Hour},
		config.Policy{Name: "watch", Quota: 10, Window: time.Hour, Mode: "shadow"},
	), token, nil)
	now := time.Now()
	for _, p := range []string{"203.0.113.0/24", "2001:db8:bad::/64"} {
		if err := e.box.Add(penalty.Ban{Prefix: netip.MustParsePrefix(p), Until: now.Add(10 * time.Minute), Reason: "abuse"}); err != nil {
			t.Fatal(err)
		}
	}
	// The one client key of the load below: 127.0.0.1's, hashed, as decide feeds it
	// (its count is not checked: the sketch halves every topHalfLife).
	rs := e.rules.Load()
	key := e.hasher.Prefix(rs.SourcePrefix(netip.MustParseAddr("127.0.0.1")))

	ctx := startChromium(t, bin)
	poll := func(what, js string) { t.Helper(); pollPage(ctx, t, what, js) }
	text := func(id string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("document.getElementById(%q).textContent", id)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// The token travels in the fragment, which no server sees.
	if err := chromedp.Do(ctx, chromedp.Navigate(e.adminURL+"/ui/#token="+token)); err != nil {
		t.Fatalf("loading /ui: %v", err)
	}
	poll("first data", `document.getElementById('status').textContent.startsWith('live') &&
		document.getElementById('total-h2').textContent === '0'`)
	t.Logf("loaded: h2 total %s, status %q", text("total-h2"), text("status"))

	// Load: 25 over HTTP/2, 10 over HTTP/3, 10 over HTTP/1.1; 5 are over the quota.
	for _, step := range []struct {
		proto string
		n     int
	}{{"h2", 25}, {"h3", 10}, {"h1", 10}} {
		c := clientFor(t, step.proto)
		for range step.n {
			resp, err := c.Get(e.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	poll("the counters move", `document.getElementById('total-h2').textContent === '25' &&
		document.getElementById('total-h3').textContent === '10' &&
		document.getElementById('total-h1').textContent === '10' &&
		document.getElementById('total-429').textContent === '5'`)
	poll("the decisions table", `(() => {
		const row = document.querySelector('#decisions tr[data-policy="burst"]');
		const shadow = document.querySelector('#decisions tr[data-policy="watch"]');
		return row && row.cells[2].textContent === '40' && row.cells[3].textContent === '5' &&
			shadow && shadow.cells[1].textContent === 'shadow' && shadow.cells[3].textContent === '35';
	})()`)
	poll("a rate shown", `document.getElementById('rate-h2').textContent !== '–' && series.h2.length >= 3`)
	poll("top keys and sources", fmt.Sprintf(`(() => {
		const rows = document.querySelectorAll('#top-keys tbody tr');
		return rows.length === 1 && rows[0].querySelector('code').title === %q &&
			document.querySelector('#top-sources tbody td') !== null;
	})()`, hex.EncodeToString(key[:])))
	t.Logf("under load: h2 %s total at %s req/s; 429s %s", text("total-h2"), text("rate-h2"), text("total-429"))

	screenshot(ctx, t, "dashboard.png")

	// Unban: the button sends DELETE /api/v1/bans/203.0.113.0/24 with the token.
	banned := netip.MustParsePrefix("203.0.113.0/24")
	if err := chromedp.Do(ctx, chromedp.Click(`button.unban[data-prefix="203.0.113.0/24"]`, chromedp.NodeVisible)); err != nil {
		t.Fatalf("clicking unban: %v", err)
	}
	poll("the ban row goes", `!document.querySelector('#bans tr[data-prefix="203.0.113.0/24"]') &&
		document.querySelector('#bans tr[data-prefix="2001:db8:bad::/64"]') !== null &&
		document.getElementById('bans-active').textContent === '1'`)
	if e.box.Banned(banned.Addr()) || slices.ContainsFunc(e.box.List(time.Now()), func(b penalty.Ban) bool { return b.Prefix == banned }) {
		t.Errorf("the penalty box never saw the lift of %s", banned)
	}
}
