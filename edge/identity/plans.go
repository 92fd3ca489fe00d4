package identity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter"
)

// Plans maps hashed API keys to plan names (keys.file or keys.redis_hash). Only hashes
// are kept: the raw keys are dropped once hashed. The zero Plans holds no key; a Plans
// is immutable once loaded, so it is safe for concurrent use.
type Plans struct {
	byKey   map[limiter.Key]string
	file    string
	modTime time.Time
	size    int64
	hash    string // the Redis hash they came from (keys.redis_hash)
}

// maxRedisPlans bounds keys.redis_hash: it is held whole in memory, twice while read.
// config.ReadKeys bounds keys.file alike.
const maxRedisPlans = 5_000_000

// HashScanner walks a Redis hash a page at a time: *redisstore.Store.
type HashScanner interface {
	ScanHash(ctx context.Context, key string, fn func(field, value string) error) error
}

// PlansFromRedis reads keys.redis_hash, a Redis hash {api-key: plan}, walking it with
// HSCAN a page at a time so that a large hash never holds Redis up for long. As with
// keys.file, a key that could never be a client key refuses the whole read.
func PlansFromRedis(ctx context.Context, c HashScanner, hash string, h Hasher) (*Plans, error) {
	p := &Plans{byKey: map[limiter.Key]string{}, hash: hash}
	names := map[string]string{} // one string per plan name, not one per key
	err := c.ScanHash(ctx, hash, func(key, plan string) error {
		if key == "" || !config.ValidKey(key) {
			return errors.New("a key is empty, longer than 256 bytes or has control characters")
		}
		name, ok := names[plan]
		if !ok {
			name = plan
			names[name] = name
		}
		p.byKey[h.Credential(key)] = name
		if len(p.byKey) > maxRedisPlans {
			return fmt.Errorf("more than %d keys", maxRedisPlans)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("keys.redis_hash %s: %w", hash, err)
	}
	return p, nil
}

// LoadPlans reads a keys file (config.ReadKeys), hashing its keys with h.
func LoadPlans(file string, h Hasher) (*Plans, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("keys.file: %w", err)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("keys.file: %w", err)
	}
	defer f.Close()
	byKey, err := config.ReadKeys(f, file, h.Credential)
	if err != nil {
		return nil, err
	}
	return &Plans{byKey: byKey, file: file, modTime: fi.ModTime(), size: fi.Size()}, nil
}

// Plan returns the plan of the hashed API key k, if it has one.
func (p *Plans) Plan(k limiter.Key) (string, bool) {
	plan, ok := p.byKey[k]
	return plan, ok
}

// Len is the number of keys.
func (p *Plans) Len() int { return len(p.byKey) }

// File is the keys file the plans came from, or "".
func (p *Plans) File() string { return p.file }

// Hash is the Redis hash the plans came from, or "".
func (p *Plans) Hash() string { return p.hash }

// Changed reports whether the keys file differs on disk from what was loaded.
func (p *Plans) Changed() bool {
	fi, err := os.Stat(p.file)
	return err == nil && (!fi.ModTime().Equal(p.modTime) || fi.Size() != p.size)
}

// SameKeys reports whether p and q map the same keys to the same plans.
func (p *Plans) SameKeys(q *Plans) bool { return maps.Equal(p.byKey, q.byKey) }
