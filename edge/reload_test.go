package edge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// startEdgeFile starts an edge from a configuration file, so reloads re-read it.
func startEdgeFile(t *testing.T, yaml string) (*testEdge, string) {
	t.Helper()
	return startEdgeFileWith(t, yaml, Options{})
}

// startEdgeFileWith is startEdgeFile with options.
func startEdgeFileWith(t *testing.T, yaml string, opts Options) (*testEdge, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "h3edge.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var e *testEdge
	e = startEdgeWith(t, func(c *config.Config) {
		loaded, err := config.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		*c = *loaded
		c.Listen = "127.0.0.1:0"
	}, opts)
	return e, file
}

const reloadBase = `
listen: "127.0.0.1:0"
admin: {listen: "127.0.0.1:0"}
ip: {streams: {rate: 100000, burst: 100000}, connections: {rate: 100000, burst: 100000}}
policies:
  - {name: keep, key: [ip], quota: 100, window: 1m}
  - {name: change, key: [ip], quota: 5, window: 1m}
`

func TestReloadKeepsUnchangedPolicies(t *testing.T) {
	e, file := startEdgeFile(t, reloadBase)
	c := clientFor(t, "h2")
	for range 3 {
		do(t, c, "GET", e.url+"/", nil, nil)
	}
	keep := e.rules.Load().Policies[0].Limiter

	// Tighten "change" and add a policy: no restart, no dropped connection.
	os.WriteFile(file, []byte(strings.Replace(reloadBase, "quota: 5,", "quota: 2,", 1)+
		"  - {name: added, key: [ip], quota: 50, window: 1m}\n"), 0o644)
	if err := e.reloadConfig(); err != nil {
		t.Fatal(err)
	}
	rs := e.rules.Load()
	if rs.Policies[0].Limiter != keep || keep.Stats().Allowed != 3 {
		t.Errorf("unchanged policy lost its state: %+v", rs.Policies[0].Limiter.Stats())
	}
	resp, _ := do(t, c, "GET", e.url+"/", nil, nil) // same connection
	if r := sfItem(t, resp.Header.Values("RateLimit"), "keep")["r"]; r != int64(96) {
		t.Errorf("keep r=%v after reload, want 96: its count carried over", r)
	}
	if q := sfItem(t, resp.Header.Values("RateLimit-Policy"), "change")["q"]; q != int64(2) {
		t.Errorf("change q=%v, want the new quota 2", q)
	}
	sfItem(t, resp.Header.Values("RateLimit-Policy"), "added")

	// An invalid file is refused with its problems; the old configuration keeps serving.
	os.WriteFile(file, []byte(reloadBase+"  - {name: broken, key: [ip], quota: -1, window: 1m}\n"), 0o644)
	err := e.reloadConfig()
	var ve config.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "policies[2].quota") {
		t.Fatalf("invalid reload: %v, want a ValidationError naming policies[2].quota", err)
	}
	resp, _ = do(t, c, "GET", e.url+"/", nil, nil)
	sfItem(t, resp.Header.Values("RateLimit-Policy"), "added")

	// What only a restart can change is refused, naming the field.
	os.WriteFile(file, []byte(strings.Replace(reloadBase, `listen: "127.0.0.1:0"`, `listen: "127.0.0.1:1"`, 1)), 0o644)
	if err := e.reloadConfig(); !errors.Is(err, errRestart) || !strings.Contains(err.Error(), "listen") {
		t.Errorf("changing listen: %v", err)
	}
}

// reloadableFields are the settings a reload applies (restartFields those it refuses).
// A new setting fails TestReloadFieldsAccountedFor until it is in one list or the
// other, and a reload really applies it or refuses it by name.
var reloadableFields = []string{
	"alt_svc", "shutdown_timeout", "upstream", "upstream_timeout", "trusted_proxies",
	"tls.certificates[].cert", "tls.certificates[].key",
	"admin.token",
	"ip.connections.rate", "ip.connections.burst", "ip.streams.rate", "ip.streams.burst",
	"ip.max_connections", "ip.retry_above",
	"keys.file", "keys.redis_hash", "keys.default_plan",
	"policies[].name", "policies[].match.path_prefix", "policies[].match.methods",
	"policies[].match.host", "policies[].match.plan", "policies[].key", "policies[].algorithm",
	"policies[].quota", "policies[].window", "policies[].unit", "policies[].scope",
	"policies[].on_store_failure", "policies[].mode", "policies[].max_delay", "policies[].lease",
	"abuse.rejections", "abuse.within", "abuse.ban", "abuse.max_ban",
	"limits.body_read_timeout", "limits.write_timeout", // read per request and per write
	"limits.max_connections", "limits.max_pending_connections", // SetCaps: new connections
	"limits.max_inflight_requests", "limits.max_goroutines", // applyOverload: new requests, the next sample
	"legacy_headers",
	"policies[].match.route", "upstreams", "routes[].name", "routes[].match.host",
	"routes[].match.path_prefix", "routes[].match.methods", "routes[].match.headers",
	"routes[].upstream", "routes[].strip_prefix", "routes[].max_body", "routes[].max_duration",
	"routes[].limits.body_read_timeout", "routes[].limits.write_timeout", // the routes are built anew
	"routes[].limits.max_connections", "routes[].limits.max_pending_connections", // refused by Validate
	"routes[].limits.max_inflight_requests", "routes[].limits.max_goroutines", // refused by Validate
	"log_format",                                                // with Options.SetLogFormat; refused without
	"access_log.path", "access_log.format", "access_log.sample", // the log is opened anew
}

// TestReloadFieldsAccountedFor fails when a setting of Config is in neither
// reloadableFields nor restartFields, or in both; and checks that changing each setting
// of restartFields is refused naming it, and changing one of reloadableFields is not.
func TestReloadFieldsAccountedFor(t *testing.T) {
	var paths []string
	settings(reflect.ValueOf(&config.Config{}), "", func(p string, _ reflect.Value) { paths = append(paths, p) })
	for _, p := range paths {
		if in, out := slices.Contains(reloadableFields, p), slices.Contains(restartFields, p); in == out {
			t.Errorf("%s: in reloadableFields %v, in restartFields %v: want it in exactly one (does a reload apply it?)", p, in, out)
		}
	}
	for _, p := range slices.Concat(reloadableFields, restartFields) {
		if !slices.Contains(paths, p) {
			t.Errorf("%s is listed, but Config has no such setting", p)
		}
	}

	full := func() *config.Config {
		c := &config.Config{}
		settings(reflect.ValueOf(c), "", func(string, reflect.Value) {})
		c.AltSvc = new(string) // settings leaves pointers to values nil
		c.ApplyDefaults()
		return c
	}
	for _, p := range paths {
		old, cfg := full(), full()
		var v reflect.Value
		settings(reflect.ValueOf(cfg), "", func(q string, at reflect.Value) {
			if q == p {
				v = at
			}
		})
		if !v.IsValid() {
			t.Fatalf("%s: no value to change: give it one in full", p)
		}
		change(t, v)
		err := restartOnly(old, cfg, restartFields)
		switch {
		case slices.Contains(restartFields, p) && (!errors.Is(err, errRestart) || err.Error() != p+": "+errRestart.Error()):
			t.Errorf("changing %s: restartOnly = %v, want it named alone", p, err)
		case !slices.Contains(restartFields, p) && err != nil:
			t.Errorf("changing %s: restartOnly = %v, want nil", p, err)
		}
	}
}

// settings calls fn with the YAML path of every setting below v ("[]" standing for a
// list index) and its value, pointers followed (the zero Value for a nil pointer to a
// value). On the way it sets every nil pointer to a struct and gives every empty list
// of structs one element, so that every setting has a place.
func settings(v reflect.Value, path string, fn func(path string, v reflect.Value)) {
	switch {
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		settings(v.Elem(), path, fn)
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			if path != "" {
				name = path + "." + name
			}
			settings(v.Field(i), name, fn)
		}
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		if v.Len() == 0 {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		}
		settings(v.Index(0), path+"[]", fn)
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			v = reflect.Value{}
		} else {
			v = v.Elem()
		}
		fn(path, v)
	default:
		fn(path, v)
	}
}

// change gives the setting v another value.
func change(t *testing.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.ValueOf("changed"), reflect.Zero(v.Type().Elem()))
		v.Set(m)
	default:
		t.Fatalf("change: no way to change a %s", v.Type())
	}
}

// abuseYAML is a configuration whose every request past the first in a minute is
// rejected, with the abuse: section given.
func abuseYAML(abuse string) string {
	return `listen: "127.0.0.1:0"
admin: {listen: "127.0.0.1:0"}
ip: {streams: {rate: 100000, burst: 100000}, connections: {rate: 100000, burst: 100000}, max_connections: 100000}
policies:
  - {name: one, key: [ip], quota: 1, window: 1m}
abuse: ` + abuse + "\n"
}

// rejectFrom sends requests over HTTP/3 from src until it has been rejected n times
// (its first request is allowed), and reports whether src is banned then. A request
// that fails counts as rejected: the ban closes the connection.
func rejectFrom(t *testing.T, e *testEdge, c *http.Client, src netip.Addr, n int) bool {
	t.Helper()
	for range n {
		resp, err := c.Get(e.url + "/")
		if err != nil {
			break
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			resp, err = c.Get(e.url + "/")
			if err != nil {
				break
			}
			resp.Body.Close()
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", resp.StatusCode)
		}
	}
	return e.box.Banned(src)
}

// dialFrom opens an HTTP/3 connection from src.
func dialFrom(t *testing.T, e *testEdge, src netip.Addr) *http.Client {
	t.Helper()
	c, err := newSourceClient(t, "h3", src.String()).dial(e.Addr().String())
	if err != nil {
		t.Fatalf("dial from %v: %v", src, err)
	}
	return c
}

// TestReloadAbuse: abuse.rejections changed in the file applies after a reload, by
// Server.Reload (SIGHUP) and by POST /api/v1/reload: a source is banned on its fourth
// rejection.
func TestReloadAbuse(t *testing.T) {
	for i, via := range []string{"Reload", "admin"} {
		t.Run(via, func(t *testing.T) {
			e, file := startEdgeFile(t, abuseYAML("{rejections: 50}"))
			os.WriteFile(file, []byte(abuseYAML("{rejections: 3}")), 0o644)
			if via == "Reload" {
				if err := e.Reload(); err != nil {
					t.Fatal(err)
				}
			} else {
				resp, err := http.Post("http://"+e.AdminAddr().String()+"/api/v1/reload", "", nil)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("POST /api/v1/reload: %d", resp.StatusCode)
				}
			}
			src := netip.AddrFrom4([4]byte{127, 0, 0, byte(40 + i)})
			c := dialFrom(t, e, src)
			if rejectFrom(t, e, c, src, 3) {
				t.Fatal("banned after 3 rejections, want the fourth to ban")
			}
			if !rejectFrom(t, e, c, src, 1) {
				t.Fatalf("not banned on the fourth rejection: the reloaded abuse.rejections is not in force (%+v)", e.box.Stats())
			}
		})
	}
}

// TestReloadKeepsBansAndStrikes: a reload that changes abuse: keeps the bans in force
// and each source's rejections so far; the new thresholds and ban length apply to them.
func TestReloadKeepsBansAndStrikes(t *testing.T) {
	e, file := startEdgeFile(t, abuseYAML("{rejections: 10, within: 10s, ban: 1m}"))
	banned, striker := netip.MustParseAddr("127.0.0.50"), netip.MustParseAddr("127.0.0.51")
	if err := e.box.Add(penalty.Ban{Prefix: netip.PrefixFrom(banned, 32), Until: time.Now().Add(time.Hour), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	c := dialFrom(t, e, striker)
	if rejectFrom(t, e, c, striker, 3) {
		t.Fatal("banned after 3 rejections of 10")
	}

	os.WriteFile(file, []byte(abuseYAML("{rejections: 4, within: 20s, ban: 2m}")), 0o644)
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	if !e.box.Banned(banned) {
		t.Error("the reload lifted a ban in force")
	}
	if _, err := newSourceClient(t, "h2", banned.String()).dial(e.Addr().String()); err == nil {
		t.Error("a banned source completed a TLS handshake after the reload")
	}
	if rejectFrom(t, e, c, striker, 1) {
		t.Fatal("banned on its 4th rejection, want the 5th (rejections: 4)")
	}
	if !rejectFrom(t, e, c, striker, 1) {
		t.Fatal("not banned on its 5th rejection: its strikes before the reload were lost, or rejections: 4 is not in force")
	}
	for _, b := range e.box.List(time.Now()) {
		if b.Prefix.Addr() == striker {
			if d := time.Until(b.Until); d < time.Minute+50*time.Second || d > 2*time.Minute {
				t.Errorf("ban of %v for %v, want the reloaded ban: 2m", striker, d)
			}
		}
	}
}

// TestReloadUpstreamTimeout: upstream_timeout changed in the file rebuilds the proxy:
// an answer 2 s away, served before, is 504 after the timeout drops to 1s.
func TestReloadUpstreamTimeout(t *testing.T) {
	up, _ := slowUpstream(t, 2*time.Second)
	conf := func(timeout string) string {
		return fmt.Sprintf("%supstream: %s\nupstream_timeout: %s\n", reloadBase, up.URL, timeout)
	}
	e, file := startEdgeFile(t, conf("10s"))
	c := clientFor(t, "h2")
	if resp, _ := do(t, c, "GET", e.url+"/slow", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("before the reload: %d, want 200 after 2 s", resp.StatusCode)
	}
	os.WriteFile(file, []byte(conf("1s")), 0o644)
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, body := do(t, c, "GET", e.url+"/slow", nil, nil)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("after the reload: %d %s, want 504", resp.StatusCode, body)
	}
	if d := time.Since(start); d > 1900*time.Millisecond {
		t.Errorf("504 after %v, want about the 1 s timeout", d)
	}
}

// TestReloadLogFormat: a reload that changes log_format calls Options.SetLogFormat;
// without it the change is refused by name.
func TestReloadLogFormat(t *testing.T) {
	json := strings.Replace(reloadBase, "\nip:", "\nlog_format: json\nip:", 1)

	e, file := startEdgeFile(t, reloadBase)
	os.WriteFile(file, []byte(json), 0o644)
	if err := e.Reload(); !errors.Is(err, errRestart) || !strings.Contains(err.Error(), "log_format") {
		t.Errorf("log_format changed without SetLogFormat: %v, want it refused by name", err)
	}

	var mu sync.Mutex
	var set []string
	e, file = startEdgeFileWith(t, reloadBase, Options{SetLogFormat: func(f string) {
		mu.Lock()
		defer mu.Unlock()
		set = append(set, f)
	}})
	os.WriteFile(file, []byte(json), 0o644)
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); err != nil { // unchanged: not called again
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(set, []string{"json"}) || e.Config().LogFormat != "json" {
		t.Errorf("SetLogFormat calls %q, log_format in force %q; want [json], json", set, e.Config().LogFormat)
	}
}

// TestReloadOverlapping: a reload reads its configuration without holding up another
// one; of two that overlap, the one that started later stays in force even when the
// earlier one finishes last.
func TestReloadOverlapping(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	calls := 0
	e := startEdgeWith(t, nil, Options{Load: func() (*config.Config, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		cfg := config.Default()
		cfg.Listen, cfg.IP, cfg.Admin.Listen = "127.0.0.1:0", roomyIP, "127.0.0.1:0"
		cfg.Policies = []config.Policy{{Name: fmt.Sprintf("load%d", n), Quota: 10, Window: time.Minute}}
		cfg.ApplyDefaults()
		if n == 1 {
			close(entered)
			<-release // a slow file
		}
		return cfg, cfg.Validate()
	}})
	first := make(chan error, 1)
	go func() { first <- e.Reload() }()
	<-entered
	second := make(chan error, 1)
	go func() { second <- e.Reload() }()
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a reload waited for another one's loading")
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := e.rules.Load().Policies[0].Name; got != "load2" {
		t.Errorf("policy in force %q, want load2: the reload that started later", got)
	}
}

// A refused reload closes the pools it had built: a pool whose health path changed
// probes no more once the reload is refused (its access log cannot be opened), while
// the pool in force probes on.
func TestRefusedReloadClosesNewPools(t *testing.T) {
	probes := make(chan string, 256)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case probes <- r.URL.Path:
		default:
		}
	}))
	t.Cleanup(o.Close)
	conf := func(path, extra string) string {
		return reloadBase + extra + fmt.Sprintf("upstreams:\n  api: {targets: [%s], health: {path: %s, interval: 50ms, timeout: 40ms}}\nroutes:\n  - {name: api, upstream: api}\n", o.URL, path)
	}
	e, file := startEdgeFile(t, conf("/hc1", ""))
	dangling := filepath.Join(t.TempDir(), "access.log")
	if err := os.Symlink("/nonexistent-dir/access.log", dangling); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(conf("/hc2", "access_log: {path: "+dangling+"}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); err == nil {
		t.Fatal("the reload was applied")
	}
	// From now on: one probe of /hc2 may still have been on its way; the leak is one
	// every 50 ms, as many as the pool in force makes.
	newer, older := 0, 0
	timeout := time.After(10 * time.Second)
	for older < 10 {
		select {
		case p := <-probes:
			if p == "/hc2" {
				newer++
			} else {
				older++
			}
		case <-timeout:
			t.Fatalf("the pool in force probed %d times in 10 s", older)
		}
	}
	if newer > 1 {
		t.Errorf("the refused reload's pool probed %d times while the one in force probed %d", newer, older)
	}
}

// goGet sends GET url on its own goroutine and then its status to codes (0: no
// response).
func goGet(c *http.Client, url string, codes chan<- int) {
	go func() {
		resp, err := c.Get(url)
		if err != nil {
			codes <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes <- resp.StatusCode
	}()
}

// slowOrigin answers "ok", and holds /slow once: arrived is closed when it comes,
// and it is answered once release is closed.
func slowOrigin(t *testing.T) (o *httptest.Server, arrived, release chan struct{}) {
	arrived, release = make(chan struct{}), make(chan struct{})
	o = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(o.Close)
	return o, arrived, release
}

// reloadAcrossSlow sends GET /slow to a slowOrigin through e, and once the origin
// holds it runs change (if not nil) and reloads e; then it lets /slow be answered,
// wants 200, and sends GET /after.
func reloadAcrossSlow(t *testing.T, e *testEdge, c *http.Client, arrived, release chan struct{}, change func()) {
	t.Helper()
	done := make(chan int, 1)
	goGet(c, e.url+"/slow", done)
	<-arrived
	if change != nil {
		change()
	}
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("/slow: %d", code)
	}
	do(t, c, "GET", e.url+"/after", nil, nil)
}

// A reload replaces the access log without losing the line of a request in flight
// across it.
func TestReloadKeepsInflightAccessLines(t *testing.T) {
	o, arrived, release := slowOrigin(t)
	path := filepath.Join(t.TempDir(), "access.log")
	e, _ := startEdgeFile(t, fmt.Sprintf("%supstream: %s\naccess_log: {path: %s}\n", reloadBase, o.URL, path))
	c := clientFor(t, "h2")
	reloadAcrossSlow(t, e, c, arrived, release, nil)
	e.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"/slow"`) || !strings.Contains(string(b), `"/after"`) {
		t.Errorf("want the lines of /slow (in flight across the reload) and /after; dropped %d:\n%s", e.accessDropped.Load(), b)
	}
}

// Changing trusted_proxies applies to the pools' forwarded fields without building
// them again: a target the pool ejected stays ejected.
func TestReloadTrustedProxiesKeepsPools(t *testing.T) {
	bad, badHits := failingOrigin(t)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	}))
	t.Cleanup(good.Close)
	conf := func(extra string) string {
		return poolBase + extra + fmt.Sprintf("upstreams:\n  api: {targets: [%s, %s], retries: 0, passive: {failures: 1, within: 10s, eject: 1m}}\nroutes:\n  - {name: api, upstream: api}\n", bad.URL, good.URL)
	}
	e, file := startEdgeFile(t, conf(""))
	c := clientFor(t, "h2")
	xff := map[string]string{"X-Forwarded-For": "192.0.2.7"}
	for range 4 {
		do(t, c, "GET", e.url+"/", xff, nil)
	}
	if badHits.Load() != 1 {
		t.Fatalf("the failing target got %d requests, want 1 (then ejected)", badHits.Load())
	}
	if _, body := do(t, c, "GET", e.url+"/", xff, nil); string(body) != "127.0.0.1" {
		t.Fatalf("X-Forwarded-For %q from an untrusted peer, want 127.0.0.1 alone", body)
	}
	if err := os.WriteFile(file, []byte(conf("trusted_proxies: [127.0.0.0/8]\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if resp, body := do(t, c, "GET", e.url+"/", xff, nil); resp.StatusCode != 200 || string(body) != "192.0.2.7, 127.0.0.1" {
			t.Errorf("after the reload: %d %q, want 200 and the client's chain kept", resp.StatusCode, body)
		}
	}
	if n := badHits.Load(); n != 1 {
		t.Errorf("the ejected target got %d requests after the reload: the pool was built again", n-1)
	}
}

// A reload that raises a concurrency policy's quota counts the requests already in
// flight: with 2 held under quota 2, quota 3 lets one more in, not three.
func TestReloadConcurrencyQuotaKeepsHeld(t *testing.T) {
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	t.Cleanup(o.Close)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	conf := func(q int) string {
		return fmt.Sprintf("listen: \"127.0.0.1:0\"\nadmin: {listen: \"127.0.0.1:0\"}\n"+
			"ip: {streams: {rate: 100000, burst: 100000}, connections: {rate: 100000, burst: 100000}}\n"+
			"upstream: %s\npolicies:\n  - {name: conc, key: [ip], algorithm: concurrency, quota: %d}\n", o.URL, q)
	}
	e, file := startEdgeFile(t, conf(2))
	c := clientFor(t, "h2")
	codes := make(chan int, 8)
	get := func() { goGet(c, e.url+"/", codes) }
	get()
	get()
	<-arrived
	<-arrived
	if resp, _ := do(t, c, "GET", e.url+"/", nil, nil); resp.StatusCode != 429 {
		t.Fatalf("a third request under quota 2: %d, want 429", resp.StatusCode)
	}
	if err := os.WriteFile(file, []byte(conf(3)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	get()
	<-arrived // the one the raised quota lets in
	get()
	if code := <-codes; code != 429 {
		t.Errorf("a fourth request in flight under quota 3: %d, want 429", code)
	}
	free()
	for range 3 {
		if code := <-codes; code != 200 {
			t.Errorf("a held request: %d, want 200", code)
		}
	}
}

// What a reload refuses after validation names the file, line and field, as the
// validator's problems do, and says what to do.
func TestReloadRefusalsPlaced(t *testing.T) {
	e, file := startEdgeFile(t, reloadBase)
	dangling := filepath.Join(t.TempDir(), "access.log")
	if err := os.Symlink("/nonexistent-dir/access.log", dangling); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ yaml, want string }{
		{strings.Replace(reloadBase, "ip: {", "ip: {max_tracked: 5000, ", 1), file + ":4:19: ip.max_tracked: cannot change while running; restart h3edge"},
		{reloadBase + "access_log: {path: " + dangling + "}\n", file + ":8:20: access_log.path: open " + dangling},
	} {
		if err := os.WriteFile(file, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		err := e.Reload()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("refusal %q, want it to begin %q", err, c.want)
		}
	}
	if err := os.WriteFile(file, []byte(strings.Replace(reloadBase, "ip: {", "ip: {max_tracked: 5000, ", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); !errors.Is(err, errRestart) {
		t.Errorf("%v does not wrap errRestart", err)
	}
}

// failingOrigin answers 503 to everything, counting the requests.
func failingOrigin(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(503)
	}))
	t.Cleanup(o.Close)
	return o, &hits
}

// poolBase is reloadBase without its policies, for tests that send more requests.
const poolBase = `
listen: "127.0.0.1:0"
admin: {listen: "127.0.0.1:0"}
ip: {streams: {rate: 100000, burst: 100000}, connections: {rate: 100000, burst: 100000}}
`

// A reload that changes a pool (here: a target added) builds it again, but the targets
// it had keep their state: an ejected one stays ejected, and their counters go on.
func TestReloadChangedPoolKeepsTargetState(t *testing.T) {
	bad, badHits := failingOrigin(t)
	good, added := startNamedOrigin(t, "good"), startNamedOrigin(t, "added")
	conf := func(targets string) string {
		return poolBase + fmt.Sprintf("upstreams:\n  api: {targets: [%s], retries: 0, passive: {failures: 1, within: 10s, eject: 1m}}\nroutes:\n  - {name: api, upstream: api}\n", targets)
	}
	e, file := startEdgeFile(t, conf(bad.URL+", "+good.URL))
	c := clientFor(t, "h2")
	for range 4 {
		do(t, c, "GET", e.url+"/", nil, nil)
	}
	if badHits.Load() != 1 {
		t.Fatalf("the failing target got %d requests, want 1 (then ejected)", badHits.Load())
	}
	series := []string{"upstream", "api", "target", good.URL, "code", "200"}
	before := counterValue(t, e.Server, "h3edge_upstream_requests_total", series...)
	if before != 3 {
		t.Fatalf("upstream_requests_total{target=good,code=200} = %v, want 3", before)
	}
	if err := os.WriteFile(file, []byte(conf(bad.URL+", "+good.URL+", "+added.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, e.Server, "h3edge_upstream_requests_total", series...); n != before {
		t.Errorf("upstream_requests_total{target=good,code=200} %v after the reload, want %v", n, before)
	}
	for range 6 {
		if resp, _ := do(t, c, "GET", e.url+"/", nil, nil); resp.StatusCode != 200 {
			t.Errorf("after the reload: %d, want 200 (the ejected target is still out)", resp.StatusCode)
		}
	}
	if n := badHits.Load(); n != 1 {
		t.Errorf("the ejected target got %d requests after the reload", n-1)
	}
	if added.hits.Load() == 0 {
		t.Error("the added target got no request")
	}
}

// A request in flight on a pool that a reload builds again finishes on the old pool,
// and counts in the new one's metrics: the target's counters are shared, not copied.
func TestReloadCountsRequestsFinishingOnOldPool(t *testing.T) {
	o, arrived, release := slowOrigin(t)
	conf := func(retries int) string {
		return poolBase + fmt.Sprintf("upstreams:\n  api: {targets: [%s], retries: %d}\nroutes:\n  - {name: api, upstream: api}\n", o.URL, retries)
	}
	e, file := startEdgeFile(t, conf(0))
	c := clientFor(t, "h2")
	reloadAcrossSlow(t, e, c, arrived, release, func() {
		if err := os.WriteFile(file, []byte(conf(1)), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	series := []string{"upstream", "api", "target", o.URL, "code", "200"}
	if n := counterValue(t, e.Server, "h3edge_upstream_requests_total", series...); n != 2 {
		t.Errorf("upstream_requests_total{target,code=200} = %v, want 2: /slow (finished on the old pool) and /after", n)
	}
}
