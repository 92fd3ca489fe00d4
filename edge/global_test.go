package edge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// redisClient returns a client of r, closed when the test ends.
func redisClient(t testing.TB, r *testkit.Redis) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestGlobalQuotaAcrossEdges(t *testing.T) {
	rd := testkit.StartRedis(t)
	mk := func() *testEdge {
		return startEdge(t, func(c *config.Config) {
			c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 200 * time.Millisecond}
			c.Keys = &config.KeysConfig{Secret: "fleet-secret"}
			c.Policies = []config.Policy{{Name: "burst", Key: []string{"header:X-API-Key"}, Quota: 10, Window: time.Minute}}
		})
	}
	a, b := mk(), mk()
	ca, cb := clientFor(t, "h3"), clientFor(t, "h2")
	ok := 0
	for i := range 30 {
		e, c := a, ca
		if i%2 == 1 {
			e, c = b, cb
		}
		resp, _ := do(t, c, "GET", e.url+"/", map[string]string{"X-API-Key": "shared"}, nil)
		switch resp.StatusCode {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if ok != 10 {
		t.Errorf("two edges admitted %d requests of one key, want exactly the quota, 10", ok)
	}
}

func TestStoreFailureModes(t *testing.T) {
	rd := testkit.StartRedis(t)
	e := startEdge(t, func(c *config.Config) {
		// Generous while Redis is up (a slow round trip on a busy machine would fall back
		// and upset the exact counts); once it is killed, calls fail at once.
		c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
		c.Abuse.Rejections = 1000000
		c.Policies = []config.Policy{
			{Name: "open", Match: config.Match{PathPrefix: "/open"}, Key: []string{"ip"}, Quota: 3, Window: time.Minute, OnStoreFailure: "open"},
			{Name: "closed", Match: config.Match{PathPrefix: "/closed"}, Key: []string{"ip"}, Quota: 3, Window: time.Minute, OnStoreFailure: "closed"},
		}
	})
	c := clientFor(t, "h2")
	if resp, _ := do(t, c, "GET", e.url+"/open", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("with Redis up: %d", resp.StatusCode)
	}
	rd.Kill()
	// closed: 503 with the problem type; never slower than the budget allows.
	start := time.Now()
	resp, body := do(t, c, "GET", e.url+"/closed", nil, nil)
	if resp.StatusCode != 503 || !contains503(body) || resp.Header.Get("Retry-After") == "" {
		t.Errorf("fail-closed policy with Redis dead: %d %s", resp.StatusCode, body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a decision with Redis dead took %v", d)
	}
	// open: admitted, but the local backstop with the same quota still limits.
	codes := map[int]int{}
	for range 6 {
		resp, _ := do(t, c, "GET", e.url+"/open", nil, nil)
		codes[resp.StatusCode]++
	}
	if codes[200] != 3 || codes[429] != 3 {
		t.Errorf("fail-open policy with Redis dead: %v, want 3 admitted by the backstop, then 429", codes)
	}
}

func contains503(body []byte) bool {
	return bytes.Contains(body, []byte("#temporary-reduced-capacity")) &&
		bytes.Contains(body, []byte(`"violated-policies":["closed"]`))
}

func TestSharedBans(t *testing.T) {
	rd := testkit.StartRedis(t)
	mk := func() *testEdge {
		return startEdge(t, func(c *config.Config) {
			c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 200 * time.Millisecond}
		})
	}
	a, b := mk(), mk()
	p := netip.MustParsePrefix("127.0.0.77/32")
	if err := a.box.Add(penalty.Ban{Prefix: p, Until: time.Now().Add(time.Minute), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testkit.WaitFor(t, time.Second, "the shared ban to reach the other edge", func() bool { return b.box.Banned(p.Addr()) })
	t.Logf("ban made on edge A applied on edge B after %v", time.Since(start))
}

// TestMetricsStoreFailureLive: a scripted mix with Redis killed mid-way; the counters in
// /metrics (through the edge's own admin listener) have exactly the expected values.
func TestMetricsStoreFailureLive(t *testing.T) {
	rd := testkit.StartRedis(t)
	e := startEdge(t, func(c *config.Config) {
		// Generous while Redis is up (a slow round trip on a busy machine would fall back
		// and upset the exact counts); once it is killed, calls fail at once.
		c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
		c.Abuse.Rejections = 1000000
		c.Policies = []config.Policy{
			{Name: "open", Match: config.Match{PathPrefix: "/open"}, Key: []string{"header:X-API-Key"}, Quota: 2, Window: time.Minute, OnStoreFailure: "open"},
			{Name: "closed", Match: config.Match{PathPrefix: "/closed"}, Key: []string{"header:X-API-Key"}, Quota: 2, Window: time.Minute, OnStoreFailure: "closed"},
		}
	})
	c := clientFor(t, "h2")
	key := "before"
	get := func(path string) int {
		resp, _ := do(t, c, "GET", e.url+path, map[string]string{"X-API-Key": key}, nil)
		return resp.StatusCode
	}
	// Redis up: open 200, 200, 429; closed 200.
	for _, want := range []int{200, 200, 429} {
		if got := get("/open"); got != want {
			t.Fatalf("/open with Redis: %d, want %d", got, want)
		}
	}
	if got := get("/closed"); got != 200 {
		t.Fatalf("/closed with Redis: %d", got)
	}
	rd.Kill()
	// Redis dead, a new key (the old one's denial is remembered until its Retry-After:
	// still denied, rightly): open falls back to its backstop — 2 admitted, then 429;
	// closed answers 503.
	key = "after"
	var open, closed []int
	for range 3 {
		open = append(open, get("/open"))
	}
	for range 2 {
		closed = append(closed, get("/closed"))
	}
	if fmt.Sprint(open, closed) != "[200 200 429] [503 503]" {
		t.Fatalf("with Redis dead: open %v, closed %v", open, closed)
	}
	resp, err := http.Get("http://" + e.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := parseExposition(t, body)
	for series, want := range map[string]float64{
		`h3edge_ratelimit_decisions_total{policy="open",result="allowed"}`:         2,
		`h3edge_ratelimit_decisions_total{policy="open",result="denied"}`:          1,
		`h3edge_ratelimit_decisions_total{policy="open",result="failed_open"}`:     3,
		`h3edge_ratelimit_decisions_total{policy="closed",result="allowed"}`:       1,
		`h3edge_ratelimit_decisions_total{policy="closed",result="failed_closed"}`: 2,
		`h3edge_requests_total{code="503",proto="h2"}`:                             2,
		`h3edge_requests_total{code="429",proto="h2"}`:                             2,
		`h3edge_requests_total{code="200",proto="h2"}`:                             5,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	if got[`h3edge_store_errors_total`] < 4 {
		t.Errorf("store_errors_total = %v, want at least the 5 failed decisions but those the open circuit answered", got[`h3edge_store_errors_total`])
	}
}

// A global concurrency policy's units count in inflight{policy} wherever this edge
// holds them: in Redis, and in the local backstop while Redis is down.
func TestInflightGaugeGlobal(t *testing.T) {
	rd := testkit.StartRedis(t)
	up, inflight := slowUpstream(t, 10*time.Second)
	e := startEdge(t, func(c *config.Config) {
		c.Upstream = up.URL
		c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 50 * time.Millisecond}
		c.Policies = []config.Policy{{Name: "conc", Key: []string{"ip"}, Algorithm: "concurrency", Quota: 10, OnStoreFailure: "open"}}
	})
	c := clientFor(t, "h2")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	send := func(n int) {
		for range n {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/slow", nil)
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
			})
		}
	}
	gauge := func() float64 {
		v, ok := inflightGauge(t, e, "conc")
		if !ok {
			t.Fatal(`h3edge_inflight{policy="conc"} missing`)
		}
		return v
	}
	send(2)
	testkit.WaitFor(t, 5*time.Second, "two requests in flight", func() bool { return inflight.Load() == 2 })
	if v := gauge(); v != 2 {
		t.Errorf("2 held in Redis: gauge %v", v)
	}
	rd.Kill()
	send(3) // decided by the local backstop
	testkit.WaitFor(t, 5*time.Second, "five requests in flight", func() bool { return inflight.Load() == 5 })
	if v := gauge(); v != 5 {
		t.Errorf("2 held in Redis and 3 in the backstop: gauge %v", v)
	}
	cancel()
	wg.Wait()
	testkit.WaitFor(t, 5*time.Second, "the inflight gauge back to 0", func() bool { return gauge() == 0 })
}

// chunks is a request body of n zero bytes, read at most size at a time, whose length
// the client does not know: HTTP/1.1 sends it chunked, HTTP/2 and HTTP/3 without
// Content-Length.
type chunks struct{ left, size int }

func (c *chunks) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.size, c.left)
	clear(p[:n])
	c.left -= n
	return n, nil
}

// streamUpload posts n bytes of unknown length to url with the API key and returns
// the status and the body of the answer.
func streamUpload(t testing.TB, c *http.Client, url, key string, n int) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, &chunks{left: n, size: 1000})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	req.Header.Set("X-API-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, body
}

// countingOrigin is an origin that reads every request body and counts the bytes it
// received as they arrive, those of bodies cut off midway included.
type countingOrigin struct {
	url            string
	received, busy atomic.Int64
}

func startCountingOrigin(t testing.TB) *countingOrigin {
	o := new(countingOrigin)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.busy.Add(1)
		defer o.busy.Add(-1)
		if _, err := io.Copy(o, r.Body); err != nil {
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	o.url = up.URL
	return o
}

func (o *countingOrigin) Write(p []byte) (int, error) {
	o.received.Add(int64(len(p)))
	return len(p), nil
}

// settled returns the bytes received once no request is in the origin's hands.
func (o *countingOrigin) settled(t testing.TB) int64 {
	testkit.WaitFor(t, 5*time.Second, "the origin idle", func() bool { return o.busy.Load() == 0 })
	return o.received.Load()
}

// Streamed bodies of one key under a global content-bytes quota, sent alternately to
// two edges that share a Redis, are admitted for at most the quota in total.
func TestContentBytesStreamedAcrossEdges(t *testing.T) {
	const quota, upload = 25000, 10000
	rd := testkit.StartRedis(t)
	origin := startCountingOrigin(t)
	mk := func() *testEdge {
		return startEdge(t, func(c *config.Config) {
			c.Upstream = origin.url
			c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
			c.Keys = &config.KeysConfig{Secret: "fleet-secret"}
			c.Abuse.Rejections = 1000000
			// fixed_window: no refill while the test runs, so the bound is exact.
			c.Policies = []config.Policy{{Name: "upload", Key: []string{"header:X-API-Key"}, Unit: "content-bytes",
				Algorithm: "fixed_window", Quota: quota, Window: 24 * time.Hour}}
		})
	}
	edges := []*testEdge{mk(), mk()}
	var total int64
	for _, proto := range []string{"h1", "h2", "h3"} {
		t.Run(proto, func(t *testing.T) {
			c := clientFor(t, proto)
			key := "stream-" + proto // a fresh quota per protocol
			var codes []int
			for i := range 6 {
				code, body := streamUpload(t, c, edges[i%2].url+"/upload", key, upload)
				if code == 429 && !strings.Contains(string(body), "content-bytes") {
					t.Errorf("upload %d: 429 without the content-bytes problem: %s", i, body)
				}
				codes = append(codes, code)
			}
			// Two uploads fit in the quota; the third is cut off at it, the rest refused.
			if fmt.Sprint(codes) != "[200 200 429 429 429 429]" {
				t.Errorf("uploads of 10 kB against a fleet quota of 25 kB, alternating edges: %v, want [200 200 429 429 429 429]", codes)
			}
			got := origin.settled(t)
			if got-total > quota {
				t.Errorf("the origin received %d bytes of one key, more than the fleet quota %d", got-total, quota)
			}
			total = got
		})
	}
}

// A request with a global and a local content-bytes policy: the local one cuts its
// body off without charging Redis for the refused part, and the global one still
// counts what every edge admitted.
func TestContentBytesStreamedMixed(t *testing.T) {
	rd := testkit.StartRedis(t)
	origin := startCountingOrigin(t)
	mk := func(local bool) *testEdge {
		return startEdge(t, func(c *config.Config) {
			c.Upstream = origin.url
			c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
			c.Keys = &config.KeysConfig{Secret: "fleet-secret"}
			c.Abuse.Rejections = 1000000
			c.Policies = []config.Policy{{Name: "fleet", Key: []string{"header:X-API-Key"}, Unit: "content-bytes",
				Algorithm: "fixed_window", Quota: 25000, Window: 24 * time.Hour}}
			if local {
				c.Policies = append(c.Policies, config.Policy{Name: "edge", Key: []string{"header:X-API-Key"}, Unit: "content-bytes",
					Algorithm: "fixed_window", Quota: 15000, Window: 24 * time.Hour, Scope: "local"})
			}
		})
	}
	a, b := mk(true), mk(false)
	c := clientFor(t, "h2")
	var codes []int
	for _, e := range []*testEdge{a, a, b, b} {
		code, _ := streamUpload(t, c, e.url+"/upload", "mixed", 10000)
		codes = append(codes, code)
	}
	// A: 10 kB (both charged), then cut off by its local 15 kB; B: what the fleet has
	// left holds one more upload, not two.
	if fmt.Sprint(codes) != "[200 429 200 429]" {
		t.Errorf("uploads A, A, B, B: %v, want [200 429 200 429]", codes)
	}
	if got := origin.settled(t); got > 25000 {
		t.Errorf("the origin received %d bytes, more than the fleet quota 25000", got)
	}
}

// While Redis cannot decide, a streamed body follows its policy's on_store_failure
// like the request does: closed cuts it off with 503, open charges the local backstop.
func TestContentBytesStreamedStoreFailure(t *testing.T) {
	rd := testkit.StartRedis(t)
	origin := startCountingOrigin(t)
	e := startEdge(t, func(c *config.Config) {
		c.Upstream = origin.url
		c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
		c.Abuse.Rejections = 1000000
		pol := func(name, failure string) config.Policy {
			return config.Policy{Name: name, Match: config.Match{PathPrefix: "/" + name}, Key: []string{"header:X-API-Key"}, Unit: "content-bytes",
				Algorithm: "fixed_window", Quota: 25000, Window: 24 * time.Hour, OnStoreFailure: failure}
		}
		c.Policies = []config.Policy{pol("open", "open"), pol("closed", "closed")}
	})
	c := clientFor(t, "h2")

	// closed: Redis dies while the body streams; the rest of it is refused with 503.
	pr, pw := io.Pipe()
	defer pr.Close()
	req, _ := http.NewRequest("POST", e.url+"/closed", pr)
	req.ContentLength = -1
	req.Header.Set("X-API-Key", "k")
	type answer struct {
		code int
		body []byte
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{code: resp.StatusCode, body: body}
	}()
	chunk := make([]byte, 1000)
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	// At the origin, hence admitted and charged in Redis: the request was decided there.
	testkit.WaitFor(t, 5*time.Second, "the origin to receive 1000 bytes", func() bool { return origin.received.Load() == 1000 })
	rd.Kill()
	go func() {
		for range 20 {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	a := <-done
	if a.err != nil || a.code != 503 || !bytes.Contains(a.body, []byte("#temporary-reduced-capacity")) ||
		!bytes.Contains(a.body, []byte(`"violated-policies":["closed"]`)) {
		t.Errorf("closed, Redis killed mid-body: %d %s %v, want 503 temporary-reduced-capacity", a.code, a.body, a.err)
	}

	// open: the local backstop (same quota) charges the bodies instead.
	var codes []int
	for range 3 {
		code, _ := streamUpload(t, c, e.url+"/open", "k", 10000)
		codes = append(codes, code)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Errorf("open, Redis dead: %v, want [200 200 429] from the backstop", codes)
	}
}

// scriptCalls returns how many scripts Redis has run (EVALSHA and EVAL).
func scriptCalls(t testing.TB, rc *redis.Client) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for line := range strings.Lines(info) {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				total += n
			}
		}
	}
	return total
}

// With lease: N a streamed body takes its bytes from Redis N at a time: fewer round
// trips, and for fixed_window still never more than the quota across the fleet.
func TestContentBytesStreamedLease(t *testing.T) {
	const quota = 100000
	rd := testkit.StartRedis(t)
	rc := redisClient(t, rd)
	origin := startCountingOrigin(t)
	mk := func() *testEdge {
		return startEdge(t, func(c *config.Config) {
			c.Upstream = origin.url
			c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
			c.Keys = &config.KeysConfig{Secret: "fleet-secret"}
			c.Abuse.Rejections = 1000000
			pol := func(name string, lease int64) config.Policy {
				return config.Policy{Name: name, Match: config.Match{PathPrefix: "/" + name}, Key: []string{"header:X-API-Key"}, Unit: "content-bytes",
					Algorithm: "fixed_window", Quota: quota, Window: 24 * time.Hour, Lease: lease}
			}
			c.Policies = []config.Policy{pol("exact", 0), pol("leased", 20000)}
		})
	}
	edges := []*testEdge{mk(), mk()}
	c := clientFor(t, "h2")
	var total int64
	for _, name := range []string{"exact", "leased"} {
		before := scriptCalls(t, rc)
		ok := 0
		for i := range 14 {
			if code, _ := streamUpload(t, c, edges[i%2].url+"/"+name, "k", 10000); code == 200 {
				ok++
			}
		}
		got := origin.settled(t)
		t.Logf("%s: %d uploads of 10 kB admitted, %d bytes at the origin, %d Redis script calls", name, ok, got-total, scriptCalls(t, rc)-before)
		if got-total > quota {
			t.Errorf("%s: the origin received %d bytes of one key, more than the fleet quota %d", name, got-total, quota)
		}
		total = got
	}
}
