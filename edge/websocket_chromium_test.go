package edge

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

// TestWebSocketOverH2InChromium: Chromium, not forced onto QUIC, loads a page over
// HTTP/2 and opens a WebSocket on that connection — RFC 8441's extended CONNECT, which
// it uses when the server's SETTINGS allow it (so a build that does not advertise it,
// or answers it 501, fails here) — through a route to an echo origin: 100 messages
// echoed, and the access log shows the CONNECT over HTTP/2.
func TestWebSocketOverH2InChromium(t *testing.T) {
	bin := chromium(t)
	if testing.Short() && !testkit.InCI() {
		t.Skip("starts a browser")
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page") }))
	t.Cleanup(page.Close)
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	t.Cleanup(echo.Close)
	accessPath := filepath.Join(t.TempDir(), "access.log")
	e := startOps(t, withAccessLog(&config.AccessLogConfig{Path: accessPath}, func(c *config.Config) {
		c.AltSvc = new(string) // no Alt-Svc: Chromium stays on HTTP/2
		c.Upstreams = map[string]config.Upstream{"ws": {Targets: []string{echo.URL}}, "site": {Targets: []string{page.URL}}}
		c.Routes = []config.Route{
			{Name: "sockets", Upstream: "ws", Match: config.RouteMatch{PathPrefix: "/ws/"}},
			{Name: "site", Upstream: "site"},
		}
	}), "", nil)
	ctx := startChromium(t, bin, chromedp.Flag("ignore-certificate-errors-spki-list", e.Certs().Pin()))
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url+"/")); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	pollPage(ctx, t, "the page", `document.body.innerText.trim() === 'page'`)
	proto, err := chromedp.Run(ctx, chromedp.Evaluate[string](`performance.getEntriesByType('navigation')[0].nextHopProtocol`))
	if err != nil || proto != "h2" {
		t.Fatalf("the page came over %q (%v), want h2", proto, err)
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](echoFromPage(e.Addr().String()), chromedp.EvalAwaitPromise)); err != nil || got != "100 echoed" {
		t.Fatalf("WebSocket: %q %v", got, err)
	}
	// The socket's line is written once its handler sees the close, which may come
	// after the page's promise resolved, and Close does not wait for handlers.
	var sockets []string
	testkit.WaitFor(t, 10*time.Second, "the WebSocket's line in the access log", func() bool {
		sockets = sockets[:0]
		for _, line := range readLines(t, accessPath) {
			var l accessLine
			if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Path, "/ws/") {
				sockets = append(sockets, fmt.Sprintf("%s %s %d %s", l.Method, l.Proto, l.Status, *l.Route))
			}
		}
		return len(sockets) > 0
	})
	e.Close()
	if len(sockets) != 1 || sockets[0] != "CONNECT HTTP/2.0 200 sockets" {
		t.Errorf("the WebSocket in the access log: %q, want one CONNECT over HTTP/2.0 answered 200 on route sockets", sockets)
	}
}

// echoFromPage is JavaScript for a page of the edge at addr: it opens a WebSocket to
// /ws/echo, sends 100 messages one after another, checks each echo, and resolves to
// "100 echoed" (rejects on anything else, or after 20 s).
func echoFromPage(addr string) string {
	return fmt.Sprintf(`new Promise((resolve, reject) => {
		const ws = new WebSocket('wss://%s/ws/echo');
		let n = 0;
		ws.onopen = () => ws.send('message 0');
		ws.onmessage = (ev) => {
			if (ev.data !== 'message ' + n) { reject(new Error('got ' + ev.data + ' for message ' + n)); return; }
			if (++n === 100) { ws.close(); resolve('100 echoed'); return; }
			ws.send('message ' + n);
		};
		ws.onerror = () => reject(new Error('WebSocket error'));
		setTimeout(() => reject(new Error('only ' + n + ' echoed')), 20000);
	})`, addr)
}
