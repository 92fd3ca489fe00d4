package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Blobs is a small store of named byte values with named locks, kept in Redis under
// one key prefix, for state a fleet of edges shares that is not quota: certificates,
// their keys and an ACME account. Each value is a hash at PREFIX+"blob:"+name holding
// the bytes and the time they were written; the set PREFIX+"index" names them all
// (for List); a lock is a string at PREFIX+"lock:"+name that holds its holder's
// token and expires on its own, so an edge that dies holding one frees it after its
// lease. Values are meant to be few and small (kilobytes); nothing here is on a
// request's path. Blobs is safe for concurrent use.
type Blobs struct {
	rdb    redis.UniversalClient
	prefix string
}

// Blobs returns the blob store under prefix (such as "h3edge:acme:") on the store's
// Redis connection. It stays usable until the Store is closed.
func (s *Store) Blobs(prefix string) *Blobs {
	return &Blobs{rdb: s.rdb, prefix: prefix}
}

// ErrNoBlob is returned by Get and Stat for a name that holds no value. It wraps
// fs.ErrNotExist, as a file system's answer would.
var ErrNoBlob = fmt.Errorf("redisstore: no such blob: %w", fs.ErrNotExist)

// The fields of a blob's hash.
const (
	blobValue    = "v"
	blobModified = "m" // Unix milliseconds
)

var (
	//go:embed lua/unlock.lua
	luaUnlock string
	//go:embed lua/extend.lua
	luaExtend string

	unlockScript = redis.NewScript(luaUnlock)
	extendScript = redis.NewScript(luaExtend)
)

func (b *Blobs) blobKey(name string) string { return b.prefix + "blob:" + name }
func (b *Blobs) lockKey(name string) string { return b.prefix + "lock:" + name }
func (b *Blobs) indexKey() string           { return b.prefix + "index" }

// Put stores value under name, replacing what was there.
func (b *Blobs) Put(ctx context.Context, name string, value []byte) error {
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, b.blobKey(name), blobValue, value, blobModified, time.Now().UnixMilli())
		p.SAdd(ctx, b.indexKey(), name)
		return nil
	})
	return err
}

// Get returns the value stored under name, or ErrNoBlob.
func (b *Blobs) Get(ctx context.Context, name string) ([]byte, error) {
	v, err := b.rdb.HGet(ctx, b.blobKey(name), blobValue).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: %s", ErrNoBlob, name)
	}
	return v, err
}

// Stat returns the size and write time of the value under name, or ErrNoBlob.
func (b *Blobs) Stat(ctx context.Context, name string) (size int64, modified time.Time, err error) {
	key := b.blobKey(name)
	var n *redis.IntCmd
	var mod *redis.StringCmd
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		n = p.HStrLen(ctx, key, blobValue)
		mod = p.HGet(ctx, key, blobModified)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return 0, time.Time{}, fmt.Errorf("%w: %s", ErrNoBlob, name)
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	ms, err := strconv.ParseInt(mod.Val(), 10, 64)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("redisstore: blob %s: write time %q: %w", name, mod.Val(), err)
	}
	return n.Val(), time.UnixMilli(ms), nil
}

// Delete removes the value under name; a name that holds none is not an error.
func (b *Blobs) Delete(ctx context.Context, name string) error {
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, b.blobKey(name))
		p.SRem(ctx, b.indexKey(), name)
		return nil
	})
	return err
}

// List returns the names that start with prefix, sorted.
func (b *Blobs) List(ctx context.Context, prefix string) ([]string, error) {
	var names []string
	var cursor uint64
	for {
		page, next, err := b.rdb.SScan(ctx, b.indexKey(), cursor, "", hashPage).Result()
		if err != nil {
			return nil, err
		}
		for _, n := range page {
			if strings.HasPrefix(n, prefix) {
				names = append(names, n)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil // SSCAN may return a member twice
}

// TryLock takes the lock name for lease unless another holder has it (SET NX PX),
// and returns the token that Unlock and Extend need; ok is false when the lock is
// taken. The lock frees itself when the lease ends: hold it longer with Extend.
func (b *Blobs) TryLock(ctx context.Context, name string, lease time.Duration) (token string, ok bool, err error) {
	var raw [16]byte
	rand.Read(raw[:])
	token = hex.EncodeToString(raw[:])
	ok, err = b.rdb.SetNX(ctx, b.lockKey(name), token, lease).Result()
	if err != nil || !ok {
		return "", false, err
	}
	return token, true, nil
}

// Unlock releases the lock name if token still holds it, and reports whether it did
// (false: the lease had ended, and another holder may have it now).
func (b *Blobs) Unlock(ctx context.Context, name, token string) (bool, error) {
	n, err := unlockScript.Run(ctx, b.rdb, []string{b.lockKey(name)}, token).Int()
	return n == 1, err
}

// Extend renews the lease of the lock name to lease from now if token still holds
// it, and reports whether it did.
func (b *Blobs) Extend(ctx context.Context, name, token string, lease time.Duration) (bool, error) {
	n, err := extendScript.Run(ctx, b.rdb, []string{b.lockKey(name)}, token, lease.Milliseconds()).Int()
	return n == 1, err
}
