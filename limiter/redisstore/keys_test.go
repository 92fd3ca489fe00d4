package redisstore

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// assertKeysExpire fails if any key in Redis has no expiry, or contains a raw client
// key (every raw key the tests use starts with "raw-").
func assertKeysExpire(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	scan := func(c *redis.Client) {
		var cursor uint64
		n := 0
		for {
			keys, next, err := c.Scan(ctx, cursor, "*", 1000).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				n++
				ttl, err := c.PTTL(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				// go-redis returns PTTL's -1 (no expiry) and -2 (gone since the
				// SCAN) as those numbers of ns.
				if ttl == -1 {
					t.Errorf("key %q has no expiry", k)
				}
				if containsRaw(k) {
					t.Errorf("key %q contains a raw client key", k)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		t.Logf("%s: %d keys, all expiring", c.Options().Addr, n)
	}
	switch c := c.(type) {
	case *redis.Client:
		scan(c)
	case *redis.ClusterClient:
		c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			scan(c)
			return nil
		})
	}
}

func containsRaw(k string) bool {
	for i := 0; i+4 <= len(k); i++ {
		if k[i:i+4] == "raw-" {
			return true
		}
	}
	return false
}
