package edge

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/websocket"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
)

// TestRoutesInChromium: Chromium, with QUIC forced for the edge's origin, loads a page
// over HTTP/3 through a route to a pool of two origin processes, and from that page
// opens a WebSocket through a second route to an echo origin and trades 100 messages
// on it. Then the dashboard's upstream panel shows both targets healthy, a WebSocket
// open over HTTP/3 as one request in flight, and, once one origin is SIGKILLed, that
// target ejected while the other stays healthy. A
// screenshot is kept as an artifact.
func TestRoutesInChromium(t *testing.T) {
	bin := chromium(t)
	if testing.Short() && !testkit.InCI() {
		t.Skip("starts a browser")
	}
	origins := []*childOrigin{{addr: freeAddr(t), name: "o0"}, {addr: freeAddr(t), name: "o1"}}
	for _, o := range origins {
		o.start(t)
		t.Cleanup(o.kill)
	}
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	t.Cleanup(echo.Close)
	const token = "upstream-panel-token"
	accessPath := filepath.Join(t.TempDir(), "access.log")
	e := startOps(t, withAccessLog(&config.AccessLogConfig{Path: accessPath}, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{
			"site": {Targets: []string{"http://" + origins[0].addr, "http://" + origins[1].addr},
				Health: &config.HealthCheck{Path: "/healthz", Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond, Unhealthy: 2, Healthy: 2}},
			"ws": {Targets: []string{echo.URL}},
		}
		c.Routes = []config.Route{
			{Name: "sockets", Upstream: "ws", Match: config.RouteMatch{PathPrefix: "/ws/"}},
			{Name: "site", Upstream: "site"},
		}
	}), token, nil)

	ctx := startChromium(t, bin,
		chromedp.Flag("origin-to-force-quic-on", e.Addr().String()),
		chromedp.Flag("ignore-certificate-errors-spki-list", e.Certs().Pin()))
	poll := func(what, js string) { t.Helper(); pollPage(ctx, t, what, js) }
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}

	// The page, over HTTP/3, from one of the pool's origins.
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url+"/")); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	poll("the page from an origin", `['o0', 'o1'].includes(document.body.innerText.trim())`)
	if p := eval(`performance.getEntriesByType('navigation')[0].nextHopProtocol`); p != "h3" {
		t.Errorf("the page came over %q, want h3", p)
	}
	t.Logf("page from %s over %s", eval(`document.body.innerText.trim()`), eval(`performance.getEntriesByType('navigation')[0].nextHopProtocol`))

	// A WebSocket from the page, through the route to the echo origin.
	got := eval(echoFromPage(e.Addr().String()))
	if got != "100 echoed" {
		t.Fatalf("WebSocket: %s", got)
	}

	// The dashboard: both targets healthy, then one killed goes unhealthy.
	if err := chromedp.Do(ctx, chromedp.Navigate(e.adminURL+"/ui/#token="+token)); err != nil {
		t.Fatalf("loading /ui: %v", err)
	}
	row := func(o *childOrigin) string {
		return fmt.Sprintf(`document.querySelector('#upstreams tr[data-target="http://%s"]')`, o.addr)
	}
	poll("both targets healthy", fmt.Sprintf(`(() => {
		const a = %s, b = %s, ws = document.querySelector('#upstreams tr[data-upstream="ws"]');
		return a && b && ws && a.dataset.state === 'healthy' && b.dataset.state === 'healthy' &&
			a.cells[3].textContent === 'healthy' && a.cells.length === 9;
	})()`, row(origins[0]), row(origins[1])))
	// A WebSocket open over HTTP/3 is one request in flight on the ws pool's target
	// while it lasts.
	sock, resp, err := wsDial(ctx, t, "h3", e.url+"/ws/echo")
	if err != nil || sock == nil {
		t.Fatalf("WebSocket over HTTP/3: %v %v", resp, err)
	}
	poll("the open WebSocket in flight", `document.querySelector('#upstreams tr[data-upstream="ws"]').cells[4].textContent === '1'`)
	sock.Close()
	poll("the closed WebSocket no longer in flight", `document.querySelector('#upstreams tr[data-upstream="ws"]').cells[4].textContent === '0'`)

	killed := time.Now()
	origins[1].kill()
	poll("the killed target ejected", fmt.Sprintf(`(() => {
		const a = %s, b = %s;
		return b.dataset.state === 'ejected' && b.cells[3].textContent === 'ejected' &&
			b.querySelector('.state-ejected') !== null && a.dataset.state === 'healthy';
	})()`, row(origins[0]), row(origins[1])))
	t.Logf("the panel showed %s ejected %v after the kill", origins[1].addr, time.Since(killed).Round(10*time.Millisecond))

	screenshot(ctx, t, "dashboard-upstreams.png")

	// Which protocol Chromium chose for its WebSocket: the access log says.
	e.Close()
	for _, line := range readLines(t, accessPath) {
		var l accessLine
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Path, "/ws/") {
			t.Logf("Chromium's WebSocket: %s %s, status %d, route %s, target %s", l.Method, l.Proto, l.Status, *l.Route, *l.Target)
			if *l.Route != "sockets" || *l.Target != echo.URL {
				t.Errorf("the WebSocket's line: %s", line)
			}
		}
	}
}
