package edge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/limiter"
)

// redisServer is a redis-server process this test started on a free port.
type redisServer struct {
	cmd  *exec.Cmd
	port int
	url  string
}

// startRedis starts a private redis-server. A missing binary skips the test locally
// and fails it under CI=true.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; .ci/run installs it")
		}
		t.Skip("redis-server not installed")
	}
	port, err := bench.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &redisServer{port: port, url: fmt.Sprintf("redis://127.0.0.1:%d/0", port)}
	r.start(t, bin)
	t.Cleanup(func() { r.cmd.Process.Kill(); r.cmd.Wait() })
	return r
}

func (r *redisServer) start(t testing.TB, bin string) {
	t.Helper()
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// client returns a client of this Redis, closed when the test ends.
func (r *redisServer) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.port)})
	t.Cleanup(func() { c.Close() })
	return c
}

// kill stops Redis at once (SIGKILL).
func (r *redisServer) kill() { r.cmd.Process.Signal(syscall.SIGKILL); r.cmd.Wait() }

func TestGlobalQuotaAcrossEdges(t *testing.T) {
	rd := startRedis(t)
	mk := func() *testEdge {
		return startEdge(t, func(c *Config) {
			c.Redis = &RedisConfig{URL: rd.url, Timeout: 200 * time.Millisecond}
			c.Keys = &KeysConfig{Secret: "fleet-secret"}
			c.Policies = []Policy{{Name: "burst", Key: []string{"header:X-API-Key"}, Quota: 10, Window: time.Minute}}
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
	rd := startRedis(t)
	e := startEdge(t, func(c *Config) {
		// Generous while Redis is up (a slow round trip on a busy machine would fall back
		// and upset the exact counts); once it is killed, calls fail at once.
		c.Redis = &RedisConfig{URL: rd.url, Timeout: 500 * time.Millisecond}
		c.Abuse.Rejections = 1000000
		c.Policies = []Policy{
			{Name: "open", Match: Match{PathPrefix: "/open"}, Key: []string{"ip"}, Quota: 3, Window: time.Minute, OnStoreFailure: "open"},
			{Name: "closed", Match: Match{PathPrefix: "/closed"}, Key: []string{"ip"}, Quota: 3, Window: time.Minute, OnStoreFailure: "closed"},
		}
	})
	c := clientFor(t, "h2")
	if resp, _ := do(t, c, "GET", e.url+"/open", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("with Redis up: %d", resp.StatusCode)
	}
	rd.kill()
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
	rd := startRedis(t)
	mk := func() *testEdge {
		return startEdge(t, func(c *Config) {
			c.Redis = &RedisConfig{URL: rd.url, Timeout: 200 * time.Millisecond}
		})
	}
	a, b := mk(), mk()
	p := netip.MustParsePrefix("127.0.0.77/32")
	if err := a.box.Add(limiter.Ban{Prefix: p, Until: time.Now().Add(time.Minute), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, time.Second, func() bool { return b.box.Banned(p.Addr()) })
	t.Logf("ban made on edge A applied on edge B after %v", time.Since(start))
}

// TestMetricsStoreFailureLive: a scripted mix with Redis killed mid-way; the counters in
// /metrics (through the edge's own admin listener) have exactly the expected values.
func TestMetricsStoreFailureLive(t *testing.T) {
	rd := startRedis(t)
	e := startEdge(t, func(c *Config) {
		// Generous while Redis is up (a slow round trip on a busy machine would fall back
		// and upset the exact counts); once it is killed, calls fail at once.
		c.Redis = &RedisConfig{URL: rd.url, Timeout: 500 * time.Millisecond}
		c.Abuse.Rejections = 1000000
		c.Policies = []Policy{
			{Name: "open", Match: Match{PathPrefix: "/open"}, Key: []string{"header:X-API-Key"}, Quota: 2, Window: time.Minute, OnStoreFailure: "open"},
			{Name: "closed", Match: Match{PathPrefix: "/closed"}, Key: []string{"header:X-API-Key"}, Quota: 2, Window: time.Minute, OnStoreFailure: "closed"},
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
	rd.kill()
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
	rd := startRedis(t)
	up, inflight := slowUpstream(t, 10*time.Second)
	e := startEdge(t, func(c *Config) {
		c.Upstream = up.URL
		c.Redis = &RedisConfig{URL: rd.url, Timeout: 50 * time.Millisecond}
		c.Policies = []Policy{{Name: "conc", Key: []string{"ip"}, Algorithm: "concurrency", Quota: 10, OnStoreFailure: "open"}}
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
	waitFor(t, 5*time.Second, func() bool { return inflight.Load() == 2 })
	if v := gauge(); v != 2 {
		t.Errorf("2 held in Redis: gauge %v", v)
	}
	rd.kill()
	send(3) // decided by the local backstop
	waitFor(t, 5*time.Second, func() bool { return inflight.Load() == 5 })
	if v := gauge(); v != 5 {
		t.Errorf("2 held in Redis and 3 in the backstop: gauge %v", v)
	}
	cancel()
	wg.Wait()
	waitFor(t, 5*time.Second, func() bool { return gauge() == 0 })
}
