package edge

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/quicconn"
)

// accessLine is a JSON line of the access log, as DESIGN.md §11 names its keys.
type accessLine struct {
	Time       string   `json:"time"`
	Proto      string   `json:"proto"`
	Method     string   `json:"method"`
	Host       string   `json:"host"`
	Path       string   `json:"path"`
	Status     int      `json:"status"`
	Bytes      int64    `json:"bytes"`
	DurationMS *float64 `json:"duration_ms"`
	Route      *string  `json:"route"`
	Upstream   *string  `json:"upstream"`
	Target     *string  `json:"target"`
	Client     string   `json:"client"`
	Key        string   `json:"key"`
	Decision   string   `json:"decision"`
}

// withAccessLog adds an access log to the test configuration.
func withAccessLog(c *config.AccessLogConfig, then func(*config.Config)) func(*config.Config) {
	return func(cfg *config.Config) {
		if then != nil {
			then(cfg)
		}
		cfg.AccessLog = c
	}
}

// readLines returns the lines of the file at path.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestAccessLogJSON: requests over HTTP/3 and HTTP/2 (and HTTP/1.1) to a real edge
// with a per-key policy each give one JSON line with what the client saw: protocol,
// path without its query, status, body bytes, the key's hash prefix that the RateLimit
// field's pk carries, the decision. The raw keys, sent in a header and in the query,
// appear nowhere in the file.
func TestAccessLogJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	e := startOps(t, withAccessLog(&config.AccessLogConfig{Path: path}, withPolicies(config.Policy{
		Name: "burst", Key: []string{"header:X-API-Key", "query:key"}, Quota: 2, Window: time.Hour,
	})), "", nil)
	const headerKey, queryKey = "raw-header-key-1234", "raw-query-key-5678"
	type sent struct {
		proto, target string
		hdr           map[string]string
		status        int
		decision      string
		pk            string // hex, from the RateLimit field
		bytes         int
	}
	steps := []sent{
		{proto: "h3", target: "/items/1", hdr: map[string]string{"X-API-Key": headerKey}, status: 200, decision: "allowed"},
		{proto: "h2", target: "/items/2", hdr: map[string]string{"X-API-Key": headerKey}, status: 200, decision: "allowed"},
		{proto: "h3", target: "/items/3", hdr: map[string]string{"X-API-Key": headerKey}, status: 429, decision: "denied"},
		{proto: "h2", target: "/items/4?key=" + queryKey + "&x=1", status: 200, decision: "allowed"},
		{proto: "h1", target: "/items/5?key=" + queryKey, status: 200, decision: "allowed"},
	}
	for i := range steps {
		st := &steps[i]
		resp, body := do(t, clientFor(t, st.proto), "GET", e.url+st.target, st.hdr, nil)
		if resp.StatusCode != st.status {
			t.Fatalf("%s %s: %d, want %d", st.proto, st.target, resp.StatusCode, st.status)
		}
		st.bytes = len(body)
		pk, _ := sfItem(t, resp.Header.Values("RateLimit"), "burst")["pk"].([]byte)
		st.pk = hex.EncodeToString(pk)
	}
	e.Close() // every request has ended: the log is written out
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{headerKey, queryKey, "key="} {
		if bytes.Contains(text, []byte(raw)) {
			t.Errorf("the access log holds %q:\n%s", raw, text)
		}
	}
	lines := readLines(t, path)
	if len(lines) != len(steps) {
		t.Fatalf("%d lines for %d requests:\n%s", len(lines), len(steps), text)
	}
	host := "127.0.0.1:" + strconv.Itoa(e.port)
	for i, st := range steps {
		var l accessLine
		if err := json.Unmarshal([]byte(lines[i]), &l); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, lines[i])
		}
		wantPath, _, _ := strings.Cut(st.target, "?")
		if l.Proto != protoVersions[st.proto] || l.Method != "GET" || l.Host != host || l.Path != wantPath ||
			l.Status != st.status || l.Bytes != int64(st.bytes) || l.Client != "127.0.0.1/32" ||
			l.Key != st.pk || len(l.Key) != 16 || l.Decision != st.decision {
			t.Errorf("line %d: %s\nwant proto %s, path %s, status %d, bytes %d, key %s, decision %s",
				i, lines[i], protoVersions[st.proto], wantPath, st.status, st.bytes, st.pk, st.decision)
		}
		if l.DurationMS == nil || *l.DurationMS < 0 || l.Route == nil || l.Upstream == nil || l.Target == nil {
			t.Errorf("line %d lacks duration_ms, route, upstream or target: %s", i, lines[i])
		}
		if ts, err := time.Parse(time.RFC3339Nano, l.Time); err != nil || time.Since(ts) > time.Minute {
			t.Errorf("line %d: time %q: %v", i, l.Time, err)
		}
	}
	if steps[0].pk != steps[2].pk || steps[3].pk != steps[4].pk || steps[0].pk == steps[3].pk {
		t.Errorf("pk per request %v: want one per client key", steps)
	}
}

// TestAccessLogReload: a reload applies a new format and opens the file again (a
// rotated file is let go), and removing access_log stops the log.
func TestAccessLogReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	var mu sync.Mutex
	var next *config.Config
	e := startOps(t, withAccessLog(&config.AccessLogConfig{Path: path}, nil), "", func() (*config.Config, error) {
		mu.Lock()
		defer mu.Unlock()
		return next, nil
	})
	c := clientFor(t, "h2")
	get := func(target string) {
		resp, _ := do(t, c, "GET", e.url+target, nil, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", target, resp.StatusCode)
		}
	}
	reload := func(al *config.AccessLogConfig) {
		mu.Lock()
		next = opsConfig(t, withAccessLog(al, nil), "")
		mu.Unlock()
		if code, _, body := e.call(t, "POST", "/api/v1/reload", nil); code != 200 {
			t.Fatalf("reload: %d %s", code, body)
		}
	}
	get("/before")
	rotated := filepath.Join(dir, "access.log.1")
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	reload(&config.AccessLogConfig{Path: path, Format: "common"})
	get("/after")
	reload(nil)
	get("/off")
	e.Close()

	old := readLines(t, rotated)
	var l accessLine
	if len(old) != 1 || json.Unmarshal([]byte(old[0]), &l) != nil || l.Path != "/before" {
		t.Errorf("the rotated file: %q, want the one JSON line of /before", old)
	}
	clf := regexp.MustCompile(`^127\.0\.0\.1/32 - - \[[^]]+\] "GET /after HTTP/2\.0" 200 \d+$`)
	if cur := readLines(t, path); len(cur) != 1 || !clf.MatchString(cur[0]) {
		t.Errorf("the new file: %q, want one Common Log Format line of /after", cur)
	}
}

var okBody = []byte("ok")

// BenchmarkAccessLog measures the chain of a real edge with no policy and a trivial
// origin: without an access log, and with one writing JSON or the Common Log Format
// to /dev/null (its goroutine's writes are outside the measured request path).
func BenchmarkAccessLog(b *testing.B) {
	for _, bc := range []struct {
		name string
		al   *config.AccessLogConfig
	}{{"off", nil}, {"json", &config.AccessLogConfig{Path: os.DevNull}}, {"common", &config.AccessLogConfig{Path: os.DevNull, Format: "common"}}} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := New(opsConfig(b, withAccessLog(bc.al, nil), ""), Options{Logger: slog.New(slog.DiscardHandler), CertCacheDir: certCache(b)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			// Unlimited per-source budgets, as BenchmarkChain: the benchmark is one source.
			if err := s.guard.SetLimits(quicconn.Config{ConnRate: -1, StreamRate: -1, MaxConnections: -1,
				MaxTracked: s.config().IP.MaxTracked}); err != nil {
				b.Fatal(err)
			}
			var origin http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(okBody) })
			s.origin.Store(&origin)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequestWithContext(identity.WithMemo(context.Background()), "GET", "https://api.example/v1/items?page=2", nil)
				r.RemoteAddr, r.ProtoMajor = "192.0.2.7:40000", 2
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					s.handler.ServeHTTP(w, r)
					if w.code != 0 && w.code != 200 {
						b.Fatalf("status %d", w.code)
					}
				}
			})
		})
	}
}

// TestAccessLogRoutes: behind routes, each line names the route, its pool and the
// target that answered — the one the response came from (each target says who it is
// in a header), the live one after a retry off a dead target, the echo origin of a
// WebSocket over HTTP/3 (logged as the CONNECT it came as); a request no route takes
// names none.
func TestAccessLogRoutes(t *testing.T) {
	named := func() *httptest.Server {
		var srv *httptest.Server
		srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Target", srv.URL)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b, live := named(), named(), named()
	dead := "http://127.0.0.1:" + strconv.Itoa(testkit.Port(t)) // nothing listens there
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	t.Cleanup(echo.Close)
	path := filepath.Join(t.TempDir(), "access.log")
	e := startOps(t, withAccessLog(&config.AccessLogConfig{Path: path}, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{
			"api":   {Targets: []string{a.URL, b.URL}},
			"flaky": {Targets: []string{dead, live.URL}},
			"ws":    {Targets: []string{echo.URL}},
		}
		c.Routes = []config.Route{
			{Name: "api", Upstream: "api", Match: config.RouteMatch{PathPrefix: "/api/"}},
			{Name: "retry", Upstream: "flaky", Match: config.RouteMatch{PathPrefix: "/flaky/"}},
			{Name: "sockets", Upstream: "ws", Match: config.RouteMatch{PathPrefix: "/ws/"}},
		}
	}), "", nil)

	type want struct{ method, proto, path, route, upstream, target string }
	var wants []want
	for i, proto := range []string{"h3", "h2", "h1", "h3", "h2", "h1"} {
		p := "/api/" + strconv.Itoa(i)
		resp, _ := do(t, clientFor(t, proto), "GET", e.url+p, nil, nil)
		if resp.StatusCode != 200 || resp.Header.Get("X-Target") == "" {
			t.Fatalf("%s %s: %d %q", proto, p, resp.StatusCode, resp.Header.Get("X-Target"))
		}
		wants = append(wants, want{"GET", protoVersions[proto], p, "api", "api", resp.Header.Get("X-Target")})
	}
	for i := range 2 { // round robin: one of the two starts on the dead target
		p := "/flaky/" + strconv.Itoa(i)
		resp, _ := do(t, clientFor(t, "h2"), "GET", e.url+p, nil, nil)
		if resp.StatusCode != 200 || resp.Header.Get("X-Target") != live.URL {
			t.Fatalf("%s: %d from %q, want 200 from %s", p, resp.StatusCode, resp.Header.Get("X-Target"), live.URL)
		}
		wants = append(wants, want{"GET", "HTTP/2.0", p, "retry", "flaky", live.URL})
	}
	if resp, _ := do(t, clientFor(t, "h3"), "GET", e.url+"/nowhere", nil, nil); resp.StatusCode != 404 {
		t.Fatalf("/nowhere: %d, want 404", resp.StatusCode)
	}
	wants = append(wants, want{"GET", "HTTP/3.0", "/nowhere", "", "", ""})
	ws, resp, err := wsDial(t.Context(), t, "h3", e.url+"/ws/echo")
	if err != nil || ws == nil {
		t.Fatalf("WebSocket over HTTP/3: %v %v", resp, err)
	}
	if err := ws.Send([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := ws.Recv(); err != nil || string(got) != "hello" {
		t.Fatalf("echo: %q %v", got, err)
	}
	ws.Close()
	wants = append(wants, want{"CONNECT", "HTTP/3.0", "/ws/echo", "sockets", "ws", echo.URL})

	e.Close() // every request has ended: the log is written out
	lines := readLines(t, path)
	if len(lines) != len(wants) {
		t.Fatalf("%d lines for %d requests:\n%s", len(lines), len(wants), strings.Join(lines, "\n"))
	}
	for i, w := range wants {
		var l accessLine
		if err := json.Unmarshal([]byte(lines[i]), &l); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, lines[i])
		}
		if l.Method != w.method || l.Proto != w.proto || l.Path != w.path || l.Route == nil || *l.Route != w.route ||
			l.Upstream == nil || *l.Upstream != w.upstream || l.Target == nil || *l.Target != w.target {
			t.Errorf("line %d: %s\nwant %+v", i, lines[i], w)
		}
	}
	seen := map[string]bool{}
	for _, w := range wants[:6] {
		seen[w.target] = true
	}
	if !seen[a.URL] || !seen[b.URL] {
		t.Errorf("round robin over %s and %s answered from %v", a.URL, b.URL, seen)
	}
}

var protoVersions = map[string]string{"h3": "HTTP/3.0", "h2": "HTTP/2.0", "h1": "HTTP/1.1"}
