package acme

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
)

// Blobs is the shared store that Config.Blobs takes: named byte values and named
// leased locks, as limiter/redisstore's Blobs provides them in Redis. A name that holds
// no value is reported with an error that wraps fs.ErrNotExist.
type Blobs interface {
	Put(ctx context.Context, name string, value []byte) error
	Get(ctx context.Context, name string) ([]byte, error)
	Stat(ctx context.Context, name string) (size int64, modified time.Time, err error)
	Delete(ctx context.Context, name string) error
	List(ctx context.Context, prefix string) ([]string, error)
	// TryLock takes the lock for lease, or reports ok false if another holder has it.
	TryLock(ctx context.Context, name string, lease time.Duration) (token string, ok bool, err error)
	// Unlock and Extend act only while token holds the lock, and say whether it did.
	Unlock(ctx context.Context, name, token string) (bool, error)
	Extend(ctx context.Context, name, token string, lease time.Duration) (bool, error)
}

// Timing of the shared locks: a holder renews its lease every lockLease/3, so an edge
// that dies holding a lock frees it within lockLease; a waiter asks again every
// lockPoll.
const (
	lockLease = 30 * time.Second
	lockPoll  = 250 * time.Millisecond
)

// blobStorage is certmagic.Storage (with its Locker) over Blobs. certmagic's keys
// are paths ("certificates/ISSUER/NAME/NAME.crt"); a "directory" is a prefix that
// ends before a '/'. Held locks are renewed in the background until Unlock.
type blobStorage struct {
	b Blobs

	mu   sync.Mutex
	held map[string]*heldLock // lock name → the lease this process holds
}

type heldLock struct {
	token string
	lease atomic.Int64 // the lease each renewal asks for, ns: lockLease or longer
	stop  chan struct{}
	done  chan struct{}
}

var (
	_ certmagic.Storage          = (*blobStorage)(nil)
	_ certmagic.LockLeaseRenewer = (*blobStorage)(nil)
)

func newBlobStorage(b Blobs) *blobStorage {
	return &blobStorage{b: b, held: make(map[string]*heldLock)}
}

func (s *blobStorage) Store(ctx context.Context, key string, value []byte) error {
	return s.b.Put(ctx, key, value)
}

func (s *blobStorage) Load(ctx context.Context, key string) ([]byte, error) {
	return s.b.Get(ctx, key)
}

// Delete removes key and, as certmagic asks of a directory, every key below it.
func (s *blobStorage) Delete(ctx context.Context, key string) error {
	below, err := s.b.List(ctx, strings.TrimSuffix(key, "/")+"/")
	if err != nil {
		return err
	}
	for _, k := range append(below, key) {
		if err := s.b.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

func (s *blobStorage) Exists(ctx context.Context, key string) bool {
	if _, _, err := s.b.Stat(ctx, key); err == nil {
		return true
	}
	below, err := s.b.List(ctx, strings.TrimSuffix(key, "/")+"/")
	return err == nil && len(below) > 0
}

// List returns the keys directly below dir (recursive: all below it), as a file
// system would list a directory: "a/b" for a value at "a/b/c" when not recursive.
func (s *blobStorage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	if dir == "" {
		prefix = ""
	}
	all, err := s.b.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if recursive {
		return all, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, k := range all {
		child := k
		if i := strings.IndexByte(k[len(prefix):], '/'); i >= 0 {
			child = k[:len(prefix)+i]
		}
		if !seen[child] {
			seen[child] = true
			out = append(out, child)
		}
	}
	if len(out) == 0 {
		return nil, fs.ErrNotExist
	}
	return out, nil
}

func (s *blobStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	size, mod, err := s.b.Stat(ctx, key)
	if err == nil {
		return certmagic.KeyInfo{Key: key, Modified: mod, Size: size, IsTerminal: true}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return certmagic.KeyInfo{}, err
	}
	if below, lerr := s.b.List(ctx, strings.TrimSuffix(key, "/")+"/"); lerr == nil && len(below) > 0 {
		return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
	}
	return certmagic.KeyInfo{}, err
}

// Lock waits until it holds the lock name, or ctx ends, and keeps renewing its lease
// until Unlock. A Redis error is returned at once: certmagic then fails the operation
// and retries it with its backoff, rather than this edge waiting on a store it cannot
// reach.
func (s *blobStorage) Lock(ctx context.Context, name string) error {
	for {
		token, ok, err := s.b.TryLock(ctx, name, lockLease)
		if err != nil {
			return err
		}
		if ok {
			h := &heldLock{token: token, stop: make(chan struct{}), done: make(chan struct{})}
			h.lease.Store(int64(lockLease))
			s.mu.Lock()
			s.held[name] = h
			s.mu.Unlock()
			go s.keepLease(name, h)
			return nil
		}
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// keepLease renews a held lock's lease until it is unlocked, or lost.
func (s *blobStorage) keepLease(name string, h *heldLock) {
	defer close(h.done)
	tick := time.NewTicker(lockLease / 3)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), lockLease/3)
			ok, err := s.b.Extend(ctx, name, h.token, time.Duration(h.lease.Load()))
			cancel()
			if err == nil && !ok {
				return // lost (expired while Redis was away): nothing left to renew
			}
		}
	}
}

func (s *blobStorage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return errors.New("acme: unlock of a lock not held: " + name)
	}
	close(h.stop)
	<-h.done
	_, err := s.b.Unlock(ctx, name, h.token)
	return err
}

// RenewLockLease extends a held lock's lease to d, for certmagic's long retries.
func (s *blobStorage) RenewLockLease(ctx context.Context, name string, d time.Duration) error {
	s.mu.Lock()
	h := s.held[name]
	s.mu.Unlock()
	if h == nil {
		return errors.New("acme: lease renewal of a lock not held: " + name)
	}
	d = max(d, lockLease)
	h.lease.Store(int64(d))
	ok, err := s.b.Extend(ctx, name, h.token, d)
	if err == nil && !ok {
		err = errors.New("acme: lock lost before its lease was renewed: " + name)
	}
	return err
}

// String names the storage in certmagic's logs and keys.
func (s *blobStorage) String() string { return "h3edge shared storage" }
