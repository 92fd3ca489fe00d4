package edge

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
)

// syncBuffer is a bytes.Buffer safe for the server's logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestPlansFromRedisHash: keys.redis_hash maps API keys to plans from a Redis hash, read
// at start, again on the watcher's period and on ReloadPlans; with Redis gone the plans
// stay; an edge started while Redis is down gives default_plan until it can read the
// hash. The raw keys never reach the log.
func TestPlansFromRedisHash(t *testing.T) {
	rd := testkit.StartRedis(t)
	rc := redisClient(t, rd)
	ctx := context.Background()
	const hash = "h3edge:plans"
	if err := rc.HSet(ctx, hash, "gold-key", "gold", "silver-key", "silver").Err(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	mk := func() *testEdge {
		return startEdgeWith(t, func(c *config.Config) {
			c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
			c.Keys = &config.KeysConfig{RedisHash: hash}
			c.Abuse.Rejections = 1000000 // the free plan's 429s must not ban the test's address
			c.Policies = []config.Policy{
				{Name: "free", Match: config.Match{Plan: "anonymous"}, Key: []string{"bearer", "ip"}, Quota: 1, Window: time.Minute},
				{Name: "gold", Match: config.Match{Plan: "gold"}, Key: []string{"bearer", "ip"}, Quota: 100, Window: time.Minute},
			}
		}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), redisPlansEvery: time.Millisecond})
	}
	e := mk()
	c := clientFor(t, "h3")
	policy := func(e *testEdge, key string) string {
		resp, _ := do(t, c, "GET", e.url+"/", map[string]string{"Authorization": "Bearer " + key}, nil)
		return resp.Header.Get("RateLimit-Policy")
	}
	if f := policy(e, "gold-key"); !strings.Contains(f, `"gold"`) || strings.Contains(f, `"free"`) {
		t.Errorf("gold key got policies %q", f)
	}
	if f := policy(e, "other"); !strings.Contains(f, `"free"`) {
		t.Errorf("unknown key got policies %q, want the default plan's", f)
	}

	// The hash changes: the watcher picks it up by itself.
	rc.HDel(ctx, hash, "gold-key")
	rc.HSet(ctx, hash, "new-key", "gold")
	testkit.WaitFor(t, 10*time.Second, "new-key's plan gold from the hash", func() bool { return strings.Contains(policy(e, "new-key"), `"gold"`) })
	if f := policy(e, "gold-key"); !strings.Contains(f, `"free"`) {
		t.Errorf("a key deleted from the hash got %q, want the default plan", f)
	}

	// Redis gone: reading fails, and the plans read last stay.
	rd.Kill()
	if err := e.ReloadPlans(); err == nil {
		t.Error("ReloadPlans with Redis dead: no error")
	}
	if f := policy(e, "new-key"); !strings.Contains(f, `"gold"`) {
		t.Errorf("with Redis dead new-key got %q, want gold still", f)
	}

	// An edge started while Redis is down serves default_plan, then the hash's plans
	// once Redis answers.
	e2 := mk()
	if f := policy(e2, "new-key"); !strings.Contains(f, `"free"`) {
		t.Errorf("edge started without Redis: new-key got %q, want the default plan", f)
	}
	rd.Start()
	rc.HSet(ctx, hash, "new-key", "gold")
	testkit.WaitFor(t, 10*time.Second, "new-key's plan gold once Redis answers", func() bool { return strings.Contains(policy(e2, "new-key"), `"gold"`) })

	out := logs.String()
	if !strings.Contains(out, "plans loaded from redis") {
		t.Errorf("no log of the plans read:\n%s", out)
	}
	for _, raw := range []string{"gold-key", "silver-key", "new-key"} {
		if strings.Contains(out, raw) {
			t.Errorf("the log holds the raw key %q", raw)
		}
	}
}

func TestPlansFromRedisHashInvalid(t *testing.T) {
	rd := testkit.StartRedis(t)
	rc := redisClient(t, rd)
	ctx := context.Background()
	rc.HSet(ctx, "plans", "good", "gold")
	e := startEdge(t, func(c *config.Config) {
		c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
		c.Keys = &config.KeysConfig{RedisHash: "plans"}
		c.Policies = []config.Policy{{Name: "gold", Match: config.Match{Plan: "gold"}, Key: []string{"bearer"}, Quota: 100, Window: time.Minute}}
	})
	before := e.plans.Load()
	if before.Len() != 1 {
		t.Fatalf("%d keys read, want 1", before.Len())
	}
	// A key no request could carry refuses the whole read; so does a hash of the wrong
	// type. The plans in force stay.
	rc.HSet(ctx, "plans", "bad\tkey", "gold")
	if err := e.ReloadPlans(); err == nil || !strings.Contains(err.Error(), "control characters") {
		t.Errorf("a key with a tab: %v", err)
	}
	rc.Del(ctx, "plans")
	rc.Set(ctx, "plans", "not a hash", 0)
	if err := e.ReloadPlans(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("a string instead of a hash: %v", err)
	}
	if e.plans.Load() != before {
		t.Error("a failed read replaced the plans")
	}
	// A missing hash is an empty one: every key gets default_plan.
	rc.Del(ctx, "plans")
	if err := e.ReloadPlans(); err != nil || e.plans.Load().Len() != 0 {
		t.Errorf("missing hash: %v, %d keys", err, e.plans.Load().Len())
	}
}

// TestPlansRedisHashPaged: a hash too large for one HSCAN reply is read whole.
func TestPlansRedisHashPaged(t *testing.T) {
	rd := testkit.StartRedis(t)
	rc := redisClient(t, rd)
	ctx := context.Background()
	const n = 2500 // past the listpack encoding (128 fields): HSCAN pages it
	for i := range n {
		rc.HSet(ctx, "plans", fmt.Sprint("key-", i), []string{"gold", "silver"}[i%2])
	}
	e := startEdge(t, func(c *config.Config) {
		c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: 500 * time.Millisecond}
		c.Keys = &config.KeysConfig{RedisHash: "plans"}
	})
	p := e.plans.Load()
	if p.Len() != n {
		t.Fatalf("%d keys read, want %d", p.Len(), n)
	}
	if got, _ := p.Plan(e.hasher.Credential("key-2499")); got != "silver" {
		t.Errorf("key-2499 has plan %q, want silver", got)
	}
}

// TestReloadToRedisHashWhileRedisDown: a reload from keys.file to keys.redis_hash while
// Redis is down keeps the file's plans; once Redis answers, the watcher reads the hash
// at its next tick, long before its 10 s period.
func TestReloadToRedisHashWhileRedisDown(t *testing.T) {
	rd := testkit.StartRedis(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	os.WriteFile(keys, []byte("gold-key: gold\n"), 0o644)
	base := fmt.Sprintf(`listen: "127.0.0.1:0"
admin: {listen: "127.0.0.1:0"}
ip: {streams: {rate: 100000, burst: 100000}, connections: {rate: 100000, burst: 100000}}
redis: {url: %q, timeout: 500ms}
policies:
  - {name: gold, match: {plan: gold}, key: [bearer], quota: 100, window: 1m, scope: local}
`, rd.URL())
	e, file := startEdgeFile(t, base+fmt.Sprintf("keys: {file: %q}\n", keys))
	key := func(k string) string { plan, _ := e.plans.Load().Plan(e.hasher.Credential(k)); return plan }
	if key("gold-key") != "gold" {
		t.Fatal("the keys file was not read")
	}
	rd.Kill()
	os.WriteFile(file, []byte(base+"keys: {redis_hash: plans}\n"), 0o644)
	if err := e.reloadConfig(); err != nil {
		t.Fatal(err)
	}
	if key("gold-key") != "gold" {
		t.Error("a reload to an unreadable hash dropped the plans in force")
	}
	rd.Start()
	rc := redisClient(t, rd)
	if err := rc.HSet(context.Background(), "plans", "hash-key", "gold").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 7*time.Second, "hash-key's plan gold once Redis answers", func() bool { return key("hash-key") == "gold" })
	if key("gold-key") != "" {
		t.Error("the file's keys outlived the switch to the hash")
	}
}
