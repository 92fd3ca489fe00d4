package edge

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	rd := startRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(rd.url, "redis://"), "/0")})
	defer rc.Close()
	ctx := context.Background()
	const hash = "h3edge:plans"
	if err := rc.HSet(ctx, hash, "gold-key", "gold", "silver-key", "silver").Err(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	mk := func() *testEdge {
		return startEdgeWith(t, func(c *Config) {
			c.Redis = &RedisConfig{URL: rd.url, Timeout: 500 * time.Millisecond}
			c.Keys = &KeysConfig{RedisHash: hash}
			c.Abuse.Rejections = 1000000 // the free plan's 429s must not ban the test's address
			c.Policies = []Policy{
				{Name: "free", Match: Match{Plan: "anonymous"}, Key: []string{"bearer", "ip"}, Quota: 1, Window: time.Minute},
				{Name: "gold", Match: Match{Plan: "gold"}, Key: []string{"bearer", "ip"}, Quota: 100, Window: time.Minute},
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
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(policy(e, "new-key"), `"gold"`) })
	if f := policy(e, "gold-key"); !strings.Contains(f, `"free"`) {
		t.Errorf("a key deleted from the hash got %q, want the default plan", f)
	}

	// Redis gone: reading fails, and the plans read last stay.
	rd.kill()
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
	bin, _ := exec.LookPath("redis-server")
	rd.start(t, bin)
	rc.HSet(ctx, hash, "new-key", "gold")
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(policy(e2, "new-key"), `"gold"`) })

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
	rd := startRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(rd.url, "redis://"), "/0")})
	defer rc.Close()
	ctx := context.Background()
	rc.HSet(ctx, "plans", "good", "gold")
	e := startEdge(t, func(c *Config) {
		c.Redis = &RedisConfig{URL: rd.url, Timeout: 500 * time.Millisecond}
		c.Keys = &KeysConfig{RedisHash: "plans"}
		c.Policies = []Policy{{Name: "gold", Match: Match{Plan: "gold"}, Key: []string{"bearer"}, Quota: 100, Window: time.Minute}}
	})
	before := e.plans.Load()
	if len(before.byKey) != 1 {
		t.Fatalf("%d keys read, want 1", len(before.byKey))
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
	if err := e.ReloadPlans(); err != nil || len(e.plans.Load().byKey) != 0 {
		t.Errorf("missing hash: %v, %d keys", err, len(e.plans.Load().byKey))
	}
}
