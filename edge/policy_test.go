package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter"
)

// withPolicies returns a mutate function for startEdge that installs ps.
func withPolicies(ps ...config.Policy) func(*config.Config) {
	return func(c *config.Config) { c.Policies = ps }
}

func do(t testing.TB, c *http.Client, method, url string, hdr map[string]string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// sfItem finds the item named name in a Structured Field List and returns its
// parameters as a map.
func sfItem(t testing.TB, field []string, name string) map[string]any {
	t.Helper()
	l, err := httpsfv.UnmarshalList(field)
	if err != nil {
		t.Fatalf("field %q does not parse: %v", field, err)
	}
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok || it.Value != name {
			continue
		}
		params := map[string]any{}
		for _, k := range it.Params.Names() {
			params[k], _ = it.Params.Get(k)
		}
		return params
	}
	t.Fatalf("no item %q in %q", name, field)
	return nil
}

func TestTokenBucketAcrossProtocols(t *testing.T) {
	e := startEdge(t, withPolicies(config.Policy{
		Name: "burst", Key: []string{"header:X-API-Key", "ip"}, Algorithm: "token_bucket", Quota: 10, Window: time.Minute,
	}))
	clients := map[string]*http.Client{"h3": clientFor(t, "h3"), "h2": clientFor(t, "h2"), "h1": clientFor(t, "h1")}
	order := []string{"h3", "h2", "h1"}
	for i := range 10 {
		proto := order[i%3]
		resp, _ := do(t, clients[proto], "GET", e.url+"/api", map[string]string{"X-API-Key": "alice"}, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d over %s: status %d, want 200", i+1, proto, resp.StatusCode)
		}
		pol := sfItem(t, resp.Header.Values("RateLimit-Policy"), "burst")
		if pol["q"] != int64(10) || pol["w"] != int64(60) {
			t.Errorf("RateLimit-Policy %v, want q=10 w=60", pol)
		}
		lim := sfItem(t, resp.Header.Values("RateLimit"), "burst")
		if lim["r"] != int64(9-i) {
			t.Errorf("request %d: r=%v, want %d", i+1, lim["r"], 9-i)
		}
		if pk, ok := lim["pk"].([]byte); !ok || len(pk) != 8 || bytes.Contains([]byte("alice"), pk) {
			t.Errorf("pk = %v, want 8 hash bytes", lim["pk"])
		}
		// One token refills every 6 s: t is at most 6.
		if tt, _ := lim["t"].(int64); tt < 1 || tt > 6 {
			t.Errorf("request %d: t=%v, want 1..6", i+1, lim["t"])
		}
	}
	for _, proto := range order {
		resp, body := do(t, clients[proto], "GET", e.url+"/api", map[string]string{"X-API-Key": "alice"}, nil)
		if resp.StatusCode != 429 {
			t.Fatalf("11th request over %s: status %d, want 429", proto, resp.StatusCode)
		}
		lim := sfItem(t, resp.Header.Values("RateLimit"), "burst")
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || lim["r"] != int64(0) || int64(ra) < lim["t"].(int64) {
			t.Errorf("429: Retry-After %q, RateLimit %v: want r=0 and Retry-After ≥ t", resp.Header.Get("Retry-After"), lim)
		}
		var doc struct {
			Type     string   `json:"type"`
			Status   int      `json:"status"`
			Violated []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(body, &doc); err != nil || doc.Status != 429 || len(doc.Violated) != 1 || doc.Violated[0] != "burst" ||
			!strings.HasSuffix(doc.Type, "#quota-exceeded") || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("problem document %s (%v)", body, err)
		}
	}
	// Another key, and a request without one (keyed by address), are independent.
	for _, hdr := range []map[string]string{{"X-API-Key": "bob"}, nil} {
		resp, _ := do(t, clients["h3"], "GET", e.url+"/api", hdr, nil)
		if resp.StatusCode != 200 {
			t.Errorf("key %v: status %d, want 200", hdr, resp.StatusCode)
		}
	}
}

func TestAllOrNothing(t *testing.T) {
	e := startEdge(t, withPolicies(
		config.Policy{Name: "burst", Key: []string{"ip"}, Quota: 5, Window: time.Minute},
		config.Policy{Name: "daily", Key: []string{"ip"}, Algorithm: "fixed_window", Quota: 3, Window: 24 * time.Hour},
	))
	c := clientFor(t, "h2")
	for i := range 6 {
		resp, body := do(t, c, "GET", e.url+"/", nil, nil)
		want := 200
		if i >= 3 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		if want == 429 {
			if !strings.Contains(string(body), `"violated-policies":["daily"]`) {
				t.Errorf("violated policies: %s", body)
			}
			// "burst" was not charged by the denied requests: 2 of 5 remain.
			if r := sfItem(t, resp.Header.Values("RateLimit"), "burst")["r"]; r != int64(2) {
				t.Errorf("burst r=%v after denials, want 2", r)
			}
		}
	}
}

func TestShadowBesideEnforced(t *testing.T) {
	e := startEdge(t, withPolicies(
		config.Policy{Name: "tight", Key: []string{"ip"}, Quota: 2, Window: time.Minute, Mode: "shadow"},
		config.Policy{Name: "loose", Key: []string{"ip"}, Quota: 5, Window: time.Minute},
	))
	c := clientFor(t, "h3")
	for i := range 5 {
		resp, _ := do(t, c, "GET", e.url+"/", nil, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, want 200 (a shadow policy never denies)", i+1, resp.StatusCode)
		}
		if f := resp.Header.Get("RateLimit-Policy"); strings.Contains(f, "tight") {
			t.Errorf("shadow policy advertised: %q", f)
		}
	}
	if resp, _ := do(t, c, "GET", e.url+"/", nil, nil); resp.StatusCode != 429 {
		t.Errorf("6th: %d, want 429 from the enforced policy", resp.StatusCode)
	}
	shadow := e.rules.Load().Policies[0].Limiter.Stats()
	if shadow.Allowed != 2 || shadow.Denied != 4 {
		t.Errorf("shadow counters %+v, want 2 allowed, 4 denied (shadow_denied)", shadow)
	}
}

// held reads how many units of concurrency policy i are in use for the IP key of
// 127.0.0.1.
func held(t testing.TB, e *testEdge, i int, quota int64) int64 {
	t.Helper()
	rs := e.rules.Load()
	k := e.hasher.Prefix(rs.SourcePrefix(mustAddr("127.0.0.1")))
	d, err := limiter.Take(context.Background(), e.store, time.Now(), limiter.Request{Policy: rs.Policies[i].Limiter, Key: k, Cost: 0})
	if err != nil {
		t.Fatal(err)
	}
	return quota - d.Remaining
}

// inflightGauge reads h3edge_inflight{policy} from e's /metrics; ok is false when the
// series is missing.
func inflightGauge(t testing.TB, e *testEdge, policy string) (v float64, ok bool) {
	t.Helper()
	resp, err := http.Get("http://" + e.admin.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	v, ok = parseExposition(t, body)[`h3edge_inflight{policy="`+policy+`"}`]
	return v, ok
}

func TestConcurrencyPolicy(t *testing.T) {
	up, inflight := slowUpstream(t, 10*time.Second)
	e := startEdge(t, func(c *config.Config) {
		c.Upstream = up.URL
		c.Policies = []config.Policy{{Name: "inflight", Key: []string{"ip"}, Algorithm: "concurrency", Unit: "concurrent-requests", Quota: 3}}
	})
	c := clientFor(t, "h2")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	for range 3 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/slow", nil)
			resp, err := c.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	testkit.WaitFor(t, 5*time.Second, "three requests in flight", func() bool { return inflight.Load() == 3 })
	if v, ok := inflightGauge(t, e, "inflight"); !ok || v != 3 {
		t.Errorf(`h3edge_inflight{policy="inflight"} = %v (present %v) with 3 in flight, want 3`, v, ok)
	}
	start := time.Now()
	resp, _ := do(t, c, "GET", e.url+"/slow", nil, nil)
	if resp.StatusCode != 429 || time.Since(start) > 2*time.Second {
		t.Fatalf("4th in flight: %d after %v, want 429 at once", resp.StatusCode, time.Since(start))
	}
	lim := sfItem(t, resp.Header.Values("RateLimit"), "inflight")
	if _, hasT := lim["t"]; hasT || lim["r"] != int64(0) {
		t.Errorf("RateLimit %v: want r=0 and no t", lim)
	}
	if pol := sfItem(t, resp.Header.Values("RateLimit-Policy"), "inflight"); pol["qu"] != "concurrent-requests" {
		t.Errorf("RateLimit-Policy %v lacks qu=concurrent-requests", pol)
	}
	// Cancelling the three frees their units; then a request is admitted again.
	cancel()
	wg.Wait()
	testkit.WaitFor(t, 5*time.Second, "the concurrency units released", func() bool { return held(t, e, 0, 3) == 0 })
	if v, ok := inflightGauge(t, e, "inflight"); !ok || v != 0 {
		t.Errorf(`h3edge_inflight{policy="inflight"} = %v (present %v) after release, want 0`, v, ok)
	}
	if resp, _ := do(t, c, "GET", e.url+"/", nil, nil); resp.StatusCode != 200 {
		t.Errorf("after release: %d, want 200", resp.StatusCode)
	}
}

// TestConcurrencyNeverLeaks cancels 1000 requests mid-flight on all protocols; no unit
// stays held.
func TestConcurrencyNeverLeaks(t *testing.T) {
	up, _ := slowUpstream(t, 10*time.Second)
	e := startEdge(t, func(c *config.Config) {
		c.Upstream = up.URL
		c.Policies = []config.Policy{{Name: "inflight", Key: []string{"ip"}, Algorithm: "concurrency", Quota: 100000}}
		// 333 HTTP/2 streams cancelled and none completed is Rapid Reset's pattern: the
		// frame guard charges the resets past its slack and the source is banned, after
		// which requests racing the ban get 429 and later ones never reach the policy.
		// This test is about the units, so the penalty box stays out of the way.
		c.Abuse.Rejections = 1000000
	})
	const n = 1000
	var wg sync.WaitGroup
	for i, proto := range []string{"h3", "h2", "h1"} {
		c := clientFor(t, proto)
		count := n / 3
		if i == 0 {
			count += n % 3
		}
		sem := make(chan struct{}, 50)
		for range count {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+len(sem))*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/slow", nil)
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
					t.Errorf("%s: a /slow request finished: %d", proto, resp.StatusCode)
				}
			})
		}
	}
	wg.Wait()
	testkit.WaitFor(t, 10*time.Second, "the concurrency units released", func() bool { return held(t, e, 0, 100000) == 0 })
	if v, ok := inflightGauge(t, e, "inflight"); !ok || v != 0 {
		t.Errorf(`h3edge_inflight{policy="inflight"} = %v (present %v) after 1000 cancellations, want 0`, v, ok)
	}
}

func TestContentBytes(t *testing.T) {
	e := startEdge(t, withPolicies(config.Policy{Name: "upload", Key: []string{"header:X-API-Key"}, Unit: "content-bytes", Quota: 10000, Window: time.Hour}))
	for _, proto := range []string{"h3", "h2", "h1"} {
		t.Run(proto, func(t *testing.T) {
			key := map[string]string{"X-API-Key": proto} // a fresh quota per protocol
			c := clientFor(t, proto)
			resp, body := do(t, c, "POST", e.url+"/upload", key, bytes.NewReader(make([]byte, 8000)))
			if resp.StatusCode != 200 || !strings.Contains(string(body), `"body_bytes":8000`) {
				t.Fatalf("first 8 kB upload: %d %s", resp.StatusCode, body)
			}
			if r := sfItem(t, resp.Header.Values("RateLimit"), "upload")["r"]; r != int64(2000) {
				t.Errorf("r=%v after 8000 bytes, want 2000", r)
			}
			if pol := sfItem(t, resp.Header.Values("RateLimit-Policy"), "upload"); pol["qu"] != "content-bytes" {
				t.Errorf("policy %v lacks qu=content-bytes", pol)
			}
			resp, _ = do(t, c, "POST", e.url+"/upload", key, bytes.NewReader(make([]byte, 8000)))
			if resp.StatusCode != 429 {
				t.Errorf("second 8 kB upload: %d, want 429", resp.StatusCode)
			}
		})
	}
	t.Run("chunked", func(t *testing.T) {
		c := clientFor(t, "h2")
		// No Content-Length: the body is charged as it streams and cut off at 10 kB.
		pr, pw := io.Pipe()
		go func() {
			chunk := make([]byte, 1000)
			for range 30 {
				if _, err := pw.Write(chunk); err != nil {
					return
				}
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", e.url+"/upload", pr)
		req.Header.Set("X-API-Key", "chunked")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		pr.Close()
		if resp.StatusCode != 429 || !strings.Contains(string(body), "content-bytes") {
			t.Errorf("30 kB chunked upload against a 10 kB quota: %d %s", resp.StatusCode, body)
		}
	})
}

func TestLeakyBucketDelays(t *testing.T) {
	e := startEdge(t, withPolicies(config.Policy{
		Name: "smooth", Key: []string{"ip"}, Algorithm: "leaky_bucket", Quota: 10, Window: time.Second, MaxDelay: 250 * time.Millisecond,
	}))
	c := clientFor(t, "h3")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var done []time.Duration
	codes := map[int]int{}
	start := time.Now()
	for range 6 {
		wg.Go(func() {
			resp, _ := do(t, c, "GET", e.url+"/", nil, nil)
			mu.Lock()
			codes[resp.StatusCode]++
			if resp.StatusCode == 200 {
				done = append(done, time.Since(start))
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	// Slots are 100 ms apart; a request may wait up to 250 ms: the first three or four
	// pass (at 0, 100, 200 ms and possibly 300 ms after the first slot) and the rest are
	// refused.
	if codes[200] < 3 || codes[200] > 4 || codes[200]+codes[429] != 6 {
		t.Errorf("statuses %v: want 3 or 4 admitted, the rest 429", codes)
	}
	slowest := time.Duration(0)
	for _, d := range done {
		slowest = max(slowest, d)
	}
	if slowest < 180*time.Millisecond {
		t.Errorf("the last admitted request finished after %v: it was not delayed to its slot", slowest)
	}
}

func TestBadClientKey(t *testing.T) {
	e := startEdge(t, withPolicies(config.Policy{Name: "k", Key: []string{"header:X-API-Key", "ip"}, Quota: 10, Window: time.Minute}))
	resp, body := do(t, clientFor(t, "h2"), "GET", e.url+"/", map[string]string{"X-API-Key": strings.Repeat("k", 257)}, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "client key") {
		t.Errorf("key of 257 bytes: %d %s, want 400", resp.StatusCode, body)
	}
	// Go's clients refuse to send a control character: write the request by hand.
	conn, err := tls.Dial("tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nX-API-Key: bad\tkey\r\nConnection: close\r\n\r\n")
	raw, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(raw), "HTTP/1.1 400 ") || !strings.Contains(string(raw), "client key") {
		t.Errorf("key with control characters: %.80q, want 400", raw)
	}
}

func TestPlansFromKeysFile(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	os.WriteFile(keys, []byte("gold-key: gold\n"), 0o644)
	e := startEdge(t, func(c *config.Config) {
		c.Keys = &config.KeysConfig{File: keys}
		c.Policies = []config.Policy{
			{Name: "free", Match: config.Match{Plan: "anonymous"}, Key: []string{"bearer", "ip"}, Quota: 1, Window: time.Minute},
			{Name: "gold", Match: config.Match{Plan: "gold"}, Key: []string{"bearer", "ip"}, Quota: 100, Window: time.Minute},
		}
	})
	c := clientFor(t, "h3")
	resp, _ := do(t, c, "GET", e.url+"/", map[string]string{"Authorization": "Bearer gold-key"}, nil)
	if f := resp.Header.Get("RateLimit-Policy"); !strings.Contains(f, `"gold"`) || strings.Contains(f, `"free"`) {
		t.Errorf("gold key got policies %q", f)
	}
	resp, _ = do(t, c, "GET", e.url+"/", map[string]string{"Authorization": "Bearer other"}, nil)
	if f := resp.Header.Get("RateLimit-Policy"); !strings.Contains(f, `"free"`) {
		t.Errorf("unknown key got policies %q, want the default plan's", f)
	}
	// The file changes: the key moves to the default plan once reloaded.
	os.WriteFile(keys, []byte("another: gold\n"), 0o644)
	if err := e.ReloadPlans(); err != nil {
		t.Fatal(err)
	}
	resp, _ = do(t, c, "GET", e.url+"/", map[string]string{"Authorization": "Bearer gold-key"}, nil)
	if f := resp.Header.Get("RateLimit-Policy"); !strings.Contains(f, `"free"`) {
		t.Errorf("after reload gold-key got %q, want the default plan", f)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
