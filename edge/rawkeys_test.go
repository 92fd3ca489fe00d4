package edge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
)

// TestRawKeysNowhere: API keys sent in a header, as a bearer token and in the query,
// over HTTP/3, HTTP/2 and HTTP/1.1, to an edge with policies of three kinds decided
// in a real Redis (a window, concurrency, content-bytes), a keys file that gives one
// of them a plan, the access log and the server's log at Debug, reach none of what
// the edge keeps or shows: not the server's log, not the access log, not a Redis key
// or value, not /metrics and not the admin API. The edge's own hashes of them do.
func TestRawKeysNowhere(t *testing.T) {
	const (
		headerKey = "rawkey-header-7f3a9c"
		bearerKey = "rawkey-bearer-91c2d4"
		queryKey  = "rawkey-query-55d0e8"
	)
	rd := testkit.StartRedis(t)
	dir := t.TempDir()
	keysFile, accessPath := filepath.Join(dir, "keys.yaml"), filepath.Join(dir, "access.log")
	if err := os.WriteFile(keysFile, []byte(bearerKey+": gold\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	e := startEdgeWith(t, func(c *config.Config) {
		c.Redis = &config.RedisConfig{URL: rd.URL(), Timeout: time.Second}
		c.Keys = &config.KeysConfig{File: keysFile}
		c.AccessLog = &config.AccessLogConfig{Path: accessPath}
		c.Abuse.Rejections = 1000000
		c.Policies = []config.Policy{
			{Name: "window", Key: []string{"header:X-API-Key", "query:key"}, Algorithm: "sliding_window", Quota: 3, Window: time.Minute},
			{Name: "gold", Match: config.Match{Plan: "gold"}, Key: []string{"bearer"}, Algorithm: "concurrency", Quota: 4},
			{Name: "bytes", Key: []string{"bearer", "header:X-API-Key", "query:key"}, Unit: "content-bytes", Quota: 1 << 20, Window: time.Minute},
		}
	}, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	var denied int
	for _, proto := range []string{"h3", "h2", "h1"} {
		c := clientFor(t, proto)
		for range 3 {
			for _, req := range []struct {
				target string
				hdr    map[string]string
			}{
				{"/h", map[string]string{"X-API-Key": headerKey}},
				{"/b", map[string]string{"Authorization": "Bearer " + bearerKey}},
				{"/q?key=" + queryKey, nil},
			} {
				resp, _ := do(t, c, "GET", e.url+req.target, req.hdr, nil)
				switch resp.StatusCode {
				case 200:
				case 429:
					denied++
				default:
					t.Fatalf("%s %s: %d", proto, req.target, resp.StatusCode)
				}
			}
		}
	}
	if denied == 0 {
		t.Fatal("no 429: the window policy did not decide in Redis")
	}

	where := map[string]string{}
	for _, path := range []string{"/metrics", "/api/v1/top?n=100", "/api/v1/stats", "/api/v1/bans", "/api/v1/config", "/api/v1/upstreams"} {
		resp, err := http.Get("http://" + e.AdminAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		where["admin "+path] = string(b)
	}
	if !strings.Contains(where["admin /api/v1/top?n=100"], `"`) {
		t.Fatalf("/api/v1/top lists nothing: %s", where["admin /api/v1/top?n=100"])
	}
	where["redis"] = redisDump(t, redisClient(t, rd))
	if !strings.Contains(where["redis"], "window") {
		t.Fatalf("Redis holds no state of the window policy:\n%s", where["redis"])
	}
	e.Close() // every request has ended: the access log is written out
	b, err := os.ReadFile(accessPath)
	if err != nil {
		t.Fatal(err)
	}
	where["access log"], where["server log"] = string(b), logs.String()
	if !strings.Contains(where["server log"], "level=DEBUG") {
		t.Fatal("no Debug line in the server's log: the check would see little")
	}
	for name, text := range where {
		for _, raw := range []string{headerKey, bearerKey, queryKey} {
			if strings.Contains(text, raw) {
				i := strings.Index(text, raw)
				t.Errorf("%s holds the raw key %q: …%s…", name, raw, text[max(i-80, 0):min(i+len(raw)+40, len(text))])
			}
		}
	}
}

// redisDump returns every key of c and its value, one per line.
func redisDump(t *testing.T, c *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		var v any
		var err error
		switch typ := c.Type(ctx, k).Val(); typ {
		case "string":
			v, err = c.Get(ctx, k).Result()
		case "hash":
			v, err = c.HGetAll(ctx, k).Result()
		case "zset":
			v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "set":
			v, err = c.SMembers(ctx, k).Result()
		case "list":
			v, err = c.LRange(ctx, k, 0, -1).Result()
		case "none": // expired since the scan
		default:
			t.Fatalf("key %q of type %s: not read", k, typ)
		}
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %v\n", k, v)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
