package edge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// namedOrigin is a real HTTP/1.1 origin on loopback that names itself in X-Origin and
// echoes the path it saw, counting the requests it got.
type namedOrigin struct {
	*httptest.Server
	hits atomic.Int64
}

func startNamedOrigin(t *testing.T, name string) *namedOrigin {
	t.Helper()
	o := &namedOrigin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		o.hits.Add(1)
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Origin", name)
		fmt.Fprintf(w, "%s %s %d", name, r.URL.Path, n)
	}))
	t.Cleanup(o.Close)
	return o
}

func retriesOf(n int) *int { return &n }

// TestRoutesPoolsAndPolicies: two pools, three routes (by host, by path prefix with
// strip_prefix and max_body, by header), a policy per route, and 404 for a request no
// route matches — over HTTP/3 and HTTP/2.
func TestRoutesPoolsAndPolicies(t *testing.T) {
	api1, api2, web := startNamedOrigin(t, "api1"), startNamedOrigin(t, "api2"), startNamedOrigin(t, "web")
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{
			"api": {Targets: []string{api1.URL, api2.URL}},
			"web": {Targets: []string{web.URL}},
		}
		c.Routes = []config.Route{
			{Name: "admin", Upstream: "web", Match: config.RouteMatch{Host: "admin.example.com"}},
			{Name: "api", Upstream: "api", Match: config.RouteMatch{PathPrefix: "/api/"}, StripPrefix: "/api", MaxBody: 1024},
			{Name: "tenant", Upstream: "web", Match: config.RouteMatch{Headers: map[string]string{"X-Tenant": "acme"}}},
		}
		c.Policies = []config.Policy{
			{Name: "api-burst", Match: config.Match{Route: "api"}, Key: []string{"header:X-API-Key"}, Quota: 4, Window: time.Minute},
			{Name: "tenant-burst", Match: config.Match{Route: "tenant"}, Key: []string{"header:X-API-Key"}, Quota: 2, Window: time.Minute},
		}
	})
	for _, proto := range []string{"h3", "h2"} {
		t.Run(proto, func(t *testing.T) {
			c := clientFor(t, proto)
			key := "key-" + proto
			do := func(method, path string, mod func(*http.Request)) (int, http.Header, string) {
				t.Helper()
				req, _ := http.NewRequest(method, e.url+path, nil)
				req.Header.Set("X-API-Key", key)
				if mod != nil {
					mod(req)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header, string(body)
			}
			// By host, before the path route: admin.example.com/api/ goes to web.
			code, h, body := do("GET", "/api/x", func(r *http.Request) { r.Host = "admin.example.com" })
			if code != 200 || body != "web /api/x 0" || h.Get("RateLimit-Policy") != "" {
				t.Errorf("host route: %d %q (policy %q), want web with the path as sent and no policy", code, body, h.Get("RateLimit-Policy"))
			}
			// By path prefix, stripped, both api targets in turn, api-burst applied.
			seen := map[string]bool{}
			for i := range 4 {
				code, h, body := do("GET", "/api/v1/items", nil)
				if code != 200 || !strings.HasSuffix(body, " /v1/items 0") {
					t.Fatalf("api route #%d: %d %q, want the stripped path /v1/items", i, code, body)
				}
				if !strings.Contains(h.Get("RateLimit-Policy"), `"api-burst"`) {
					t.Errorf("api route: RateLimit-Policy %q, want api-burst", h.Get("RateLimit-Policy"))
				}
				seen[strings.Fields(body)[0]] = true
			}
			if !seen["api1"] || !seen["api2"] {
				t.Errorf("api route reached %v, want both targets", seen)
			}
			if code, _, _ := do("GET", "/api/v1/items", nil); code != 429 {
				t.Errorf("5th api request: %d, want 429 from api-burst", code)
			}
			// By header: tenant-burst only.
			for i := range 3 {
				code, h, body := do("GET", "/t", func(r *http.Request) { r.Header.Set("X-Tenant", "acme") })
				want := 200
				if i == 2 {
					want = 429
				}
				if code != want || (code == 200 && body != "web /t 0") || !strings.Contains(h.Get("RateLimit-Policy"), `"tenant-burst"`) {
					t.Errorf("tenant route #%d: %d %q %q, want %d from web under tenant-burst", i, code, body, h.Get("RateLimit-Policy"), want)
				}
			}
			// No route: 404 problem document.
			code, h, body = do("GET", "/nowhere", nil)
			if code != 404 || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"status":404`) {
				t.Errorf("no route: %d %s %q, want a 404 problem document", code, h.Get("Content-Type"), body)
			}
		})
	}
}

// TestRouteMaxBody: a body whose Content-Length passes max_body gets 413 before the
// upstream sees a byte; a streamed one is cut with 413 once it passes.
func TestRouteMaxBody(t *testing.T) {
	o := startNamedOrigin(t, "o")
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"o": {Targets: []string{o.URL}}}
		c.Routes = []config.Route{{Name: "up", Upstream: "o", MaxBody: 1024}}
	})
	for _, proto := range []string{"h3", "h2"} {
		c := clientFor(t, proto)
		before := o.hits.Load()
		resp, err := c.Post(e.url+"/u", "application/octet-stream", bytes.NewReader(make([]byte, 2048)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 || o.hits.Load() != before {
			t.Errorf("%s: Content-Length 2048: %d, origin hits +%d, want 413 and none", proto, resp.StatusCode, o.hits.Load()-before)
		}
		// Streamed: no Content-Length.
		pr, pw := io.Pipe()
		go func() {
			for range 8 {
				if _, err := pw.Write(make([]byte, 512)); err != nil {
					return
				}
			}
			pw.Close()
		}()
		resp, err = c.Post(e.url+"/u", "application/octet-stream", pr)
		if err != nil {
			t.Fatalf("%s: streamed: %v", proto, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		pr.CloseWithError(io.ErrClosedPipe)
		if resp.StatusCode != 413 {
			t.Errorf("%s: streamed 4096 bytes: %d %q, want 413", proto, resp.StatusCode, body)
		}
		resp, err = c.Post(e.url+"/u", "application/octet-stream", bytes.NewReader(make([]byte, 1024)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "o /u 1024" {
			t.Errorf("%s: body at the bound: %d %q, want 200", proto, resp.StatusCode, body)
		}
	}
}

// TestAllTargetsDown: with every target down, the answer is a 503 problem document
// with Retry-After, in well under 50 ms each.
func TestAllTargetsDown(t *testing.T) {
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"gone": {
			Targets: []string{"http://" + freeAddr(t), "http://" + freeAddr(t)},
			Passive: config.Passive{Failures: 1, Eject: 30 * time.Second},
		}}
		c.Routes = []config.Route{{Name: "all", Upstream: "gone"}}
	})
	for _, proto := range []string{"h3", "h2"} {
		c := clientFor(t, proto)
		get := func() (*http.Response, string, time.Duration) {
			start := time.Now()
			resp, err := c.Get(e.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp, string(body), time.Since(start)
		}
		get() // the first finds both refusing and ejects them
		for range 20 {
			resp, body, took := get()
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"status":503`) {
				t.Fatalf("%s: %d Retry-After %q %q, want a 503 problem document with Retry-After", proto, resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			if took > 50*time.Millisecond {
				t.Errorf("%s: 503 took %v, want < 50ms", proto, took)
			}
		}
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestOriginProcess is not a test: it is the origin TestKilledTargetUnderLoad runs as
// a child process (the test binary re-executed), so that it can be SIGKILLed.
func TestOriginProcess(t *testing.T) {
	addr, name := os.Getenv("H3EDGE_TEST_ORIGIN_ADDR"), os.Getenv("H3EDGE_TEST_ORIGIN_NAME")
	if addr == "" {
		t.Skip("the child-process origin of TestKilledTargetUnderLoad")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Origin", name)
		io.WriteString(w, name)
	}))
}

// childOrigin is an origin in its own process on a fixed loopback address.
type childOrigin struct {
	addr, name string
	cmd        *exec.Cmd
}

func (o *childOrigin) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOriginProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "H3EDGE_TEST_ORIGIN_ADDR="+o.addr, "H3EDGE_TEST_ORIGIN_NAME="+o.name)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", o.addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("origin %s did not listen on %s", o.name, o.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (o *childOrigin) kill() {
	if o.cmd != nil {
		o.cmd.Process.Signal(syscall.SIGKILL)
		o.cmd.Wait()
		o.cmd = nil
	}
}

// TestKilledTargetUnderLoad: three origin processes behind a pool, 200 GETs a second
// on each of HTTP/3 and HTTP/2; one origin is SIGKILLed: no request fails (the ones it
// had are retried), it is out of rotation within 1 s, and restarted it gets traffic
// again within interval × healthy + 1 s.
func TestKilledTargetUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 6 s of load")
	}
	origins := make([]*childOrigin, 3)
	var targets []string
	for i := range origins {
		origins[i] = &childOrigin{addr: freeAddr(t), name: "o" + strconv.Itoa(i)}
		origins[i].start(t)
		t.Cleanup(origins[i].kill)
		targets = append(targets, "http://"+origins[i].addr)
	}
	const interval, healthy = 200 * time.Millisecond, 2
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"api": {
			Targets: targets, Retries: retriesOf(2),
			Health:  &config.HealthCheck{Path: "/healthz", Interval: interval, Timeout: interval, Unhealthy: 2, Healthy: healthy},
			Passive: config.Passive{Failures: 3, Within: 10 * time.Second, Eject: time.Second},
		}}
		c.Routes = []config.Route{{Name: "api", Upstream: "api"}}
	})

	// The load: 200 GETs a second per protocol, each recording when it was answered
	// by which origin, or how it failed.
	type result struct {
		at     time.Time
		origin string
		err    string
	}
	var mu sync.Mutex
	var results []result
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, proto := range []string{"h3", "h2"} {
		c := clientFor(t, proto)
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				inflight.Go(func() {
					r := result{}
					resp, err := c.Get(e.url + "/")
					if err != nil {
						r.err = proto + ": " + err.Error()
					} else {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							r.err = fmt.Sprintf("%s: status %d %s", proto, resp.StatusCode, body)
						}
						r.origin = resp.Header.Get("X-Origin")
					}
					r.at = time.Now()
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				})
			}
		})
	}
	loadStart := time.Now()
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)

	pool := func() []struct{ URL, State string } {
		var st struct {
			Upstreams []struct {
				Targets []struct{ URL, State string }
			}
		}
		resp, err := http.Get("http://" + e.AdminAddr().String() + "/api/v1/upstreams")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Upstreams) != 1 {
			t.Fatalf("GET /api/v1/upstreams: %v %+v", err, st)
		}
		return st.Upstreams[0].Targets
	}
	waitUntil := func(d time.Duration, what string, cond func() bool) time.Duration {
		start := time.Now()
		for !cond() {
			if time.Since(start) > d {
				t.Fatalf("%s: not within %v", what, d)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}

	time.Sleep(time.Second) // the load runs: this is the phase before the kill, not a wait for an event
	victim := origins[1]
	killed := time.Now()
	victim.kill()
	ejectedIn := waitUntil(time.Second, "the killed target out of rotation", func() bool { return pool()[1].State == "ejected" })
	t.Logf("killed target ejected after %v", ejectedIn)

	time.Sleep(1500 * time.Millisecond) // load on two targets
	victim.start(t)
	restarted := time.Now()
	bound := interval*healthy + time.Second
	back := waitUntil(bound+time.Second, "traffic to the restarted target", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := len(results) - 1; i >= 0 && results[i].at.After(restarted); i-- {
			if results[i].origin == victim.name {
				return true
			}
		}
		return false
	})
	t.Logf("restarted target answered again after %v (bound %v)", back, bound)
	if back > bound {
		t.Errorf("restarted target got traffic after %v, want within interval × healthy + 1s = %v", back, bound)
	}
	time.Sleep(500 * time.Millisecond)
	stopLoad()
	elapsed := time.Since(loadStart)

	mu.Lock()
	defer mu.Unlock()
	failed, after := 0, 0
	for _, r := range results {
		if r.err != "" {
			failed++
			if failed <= 5 {
				t.Errorf("request failed: %s", r.err)
			}
		}
		if r.at.After(killed) {
			after++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d requests failed, want none", failed, len(results))
	}
	// The load must have kept going through the kill and the restart. How close it
	// came to its 400 a second is a figure of the machine (H3EDGE_PERF=1 asks 80 %);
	// a loaded 2-core CI machine always manages a quarter.
	share := 0.25
	if os.Getenv("H3EDGE_PERF") == "1" {
		share = 0.8
	}
	if want := int(share * 400 * elapsed.Seconds()); len(results) < want {
		t.Errorf("only %d requests in %v at 400 a second, want at least %d", len(results), elapsed, want)
	}
	t.Logf("%d requests, %d after the kill", len(results), after)

	// The metrics tell the same story.
	resp, err := http.Get("http://" + e.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`h3edge_upstream_requests_total{code="200",target="http://` + victim.addr + `",upstream="api"}`,
		`h3edge_upstream_healthy{target="http://` + victim.addr + `",upstream="api"} 1`,
		`h3edge_upstream_retries_total{upstream="api"}`,
		`h3edge_upstream_duration_seconds_count{upstream="api"}`,
		`h3edge_route_requests_total{code="200",proto="h3",route="api"}`,
		`h3edge_route_requests_total{code="200",proto="h2",route="api"}`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// connOrigin is a namedOrigin that counts its open connections.
func connOrigin(t *testing.T, name string) (*namedOrigin, *atomic.Int64) {
	t.Helper()
	var open atomic.Int64
	o := &namedOrigin{}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.hits.Add(1)
		w.Header().Set("X-Origin", name)
		io.WriteString(w, name)
	}))
	o.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	return o, &open
}

// TestReloadRoutes: a reload that changes routes and one pool's targets applies on
// the client's open connection; the unchanged pool is kept as it was, and the changed
// pool's old connections are closed.
func TestReloadRoutes(t *testing.T) {
	a, aOpen := connOrigin(t, "a")
	b, _ := connOrigin(t, "b")
	web := startNamedOrigin(t, "web")
	conf := func(api, extra string) string {
		return reloadBase + fmt.Sprintf(`upstreams:
  api: {targets: [%s]}
  web: {targets: [%s]}
routes:
  - {name: api, upstream: api, match: {path_prefix: /api/}}
%s  - {name: web, upstream: web}
`, api, web.URL, extra)
	}
	e, file := startEdgeFile(t, conf(a.URL, ""))
	c := clientFor(t, "h2")
	get := func(path string) string {
		t.Helper()
		resp, body := do(t, c, "GET", e.url+path, nil, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	if got := get("/api/x"); got != "a" {
		t.Fatalf("before: /api/ reached %q, want a", got)
	}
	get("/")
	webPool := e.routing.Load().pools["web"]
	if aOpen.Load() == 0 {
		t.Fatal("the edge holds no connection to a")
	}
	edgeConns := openConns(e)
	os.WriteFile(file, []byte(conf(b.URL, "  - {name: v2, upstream: web, match: {path_prefix: /v2/}}\n")), 0o644)
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := get("/api/x"); got != "b" {
		t.Errorf("after: /api/ reached %q, want b", got)
	}
	if got := get("/v2/x"); got != "web /v2/x 0" {
		t.Errorf("after: the new route /v2/ reached %q, want web", got)
	}
	if e.routing.Load().pools["web"] != webPool {
		t.Error("the unchanged pool web was rebuilt")
	}
	if n := openConns(e); n != edgeConns {
		t.Errorf("the client's connections to the edge went from %d to %d across the reload", edgeConns, n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for aOpen.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the replaced target a still open", aOpen.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openConns counts the edge's open TCP connections.
func openConns(e *testEdge) int { return e.tcp.Open() }

// TestHashByClientKey: a hash pool keeps each client's API key (the policies' key
// source) on one target over 300 requests, over HTTP/3, with every target used.
func TestHashByClientKey(t *testing.T) {
	var urls []string
	for _, n := range []string{"a", "b", "c"} {
		urls = append(urls, startNamedOrigin(t, n).URL)
	}
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"api": {Targets: urls, Balance: "hash"}}
		c.Routes = []config.Route{{Name: "api", Upstream: "api"}}
		c.Policies = []config.Policy{{Name: "roomy", Key: []string{"header:X-API-Key", "ip"}, Quota: 1000000, Window: time.Minute}}
	})
	c := clientFor(t, "h3")
	where, used := map[string]string{}, map[string]bool{}
	for i := range 300 {
		key := "key-" + strconv.Itoa(i%30)
		resp, body := do(t, c, "GET", e.url+"/", map[string]string{"X-API-Key": key}, nil)
		o := resp.Header.Get("X-Origin")
		if resp.StatusCode != 200 || o == "" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if prev, ok := where[key]; ok && prev != o {
			t.Fatalf("key %s moved from %s to %s", key, prev, o)
		}
		where[key], used[o] = o, true
	}
	if len(used) != 3 {
		t.Errorf("30 keys reached %v, want all 3 targets", used)
	}
}

// A route's max_duration that passes before the upstream answers is a 504 on every
// protocol, not an empty 200.
func TestMaxDurationBeforeAnswerIs504(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, "late")
	}))
	t.Cleanup(o.Close)
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"api": {Targets: []string{o.URL}}}
		c.Routes = []config.Route{{Name: "api", Upstream: "api", MaxDuration: 200 * time.Millisecond}}
	})
	for _, p := range protos {
		resp, body := do(t, clientFor(t, p.name), "GET", e.url+"/report", nil, nil)
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("%s: %d %q, want 504", p.name, resp.StatusCode, body)
		}
	}
}
