package edge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter"
)

// plans maps hashed API keys to plan names. Only hashes are kept: the raw keys of the
// file or the Redis hash are dropped once hashed.
type plans struct {
	byKey   map[limiter.Key]string
	file    string
	modTime time.Time
	size    int64
	hash    string // the Redis hash they came from (keys.redis_hash)
}

// redisPlansEvery is how often keys.redis_hash is read again: each read walks the whole
// hash, so not every 2 s like the files.
const redisPlansEvery = 10 * time.Second

// redisPlansTimeout bounds one read of keys.redis_hash.
const redisPlansTimeout = 5 * time.Second

// maxRedisPlans bounds keys.redis_hash: it is held whole in memory, twice while read.
// config.ReadKeys bounds keys.file alike.
const maxRedisPlans = 5_000_000

// hashScanner walks a Redis hash a page at a time: *redisstore.Store.
type hashScanner interface {
	ScanHash(ctx context.Context, key string, fn func(field, value string) error) error
}

// plansFromRedis reads keys.redis_hash, a Redis hash {api-key: plan}, walking it with
// HSCAN a page at a time so that a large hash never holds Redis up for long. As with
// keys.file, a key that could never be a client key refuses the whole read.
func plansFromRedis(ctx context.Context, c hashScanner, hash string, h hasher) (*plans, error) {
	p := &plans{byKey: map[limiter.Key]string{}, hash: hash}
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
		p.byKey[h.key('k', key)] = name
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

// loadPlans reads a keys file (config.ReadKeys), hashing its keys with h.
func loadPlans(file string, h hasher) (*plans, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("keys.file: %w", err)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("keys.file: %w", err)
	}
	defer f.Close()
	byKey, err := config.ReadKeys(f, file, func(key string) limiter.Key { return h.key('k', key) })
	if err != nil {
		return nil, err
	}
	return &plans{byKey: byKey, file: file, modTime: fi.ModTime(), size: fi.Size()}, nil
}

// changed reports whether the file differs from what was loaded.
func (p *plans) changed() bool {
	fi, err := os.Stat(p.file)
	return err == nil && (!fi.ModTime().Equal(p.modTime) || fi.Size() != p.size)
}

// ReloadPlans re-reads keys.file or keys.redis_hash; on error the old plans stay.
func (s *Server) ReloadPlans() error {
	if hash := s.config().Keys.RedisHash; hash != "" {
		// Read outside reloadMu, so that a slow Redis holds up no configuration reload;
		// stored only if the configuration still names this hash.
		p, err := s.redisPlans(hash)
		if err != nil {
			return err
		}
		s.reloadMu.Lock()
		defer s.reloadMu.Unlock()
		if s.config().Keys.RedisHash == hash {
			s.plans.Store(p)
		}
		return nil
	}
	// The file is read outside reloadMu too (a million keys take about a second). A
	// configuration reload that started after this read and committed first wins; this
	// does not count as one (s.reloaded), since it does not read the configuration. A
	// reload that read the file before this and commits after it leaves older plans,
	// whose modification time the watcher then finds changed and reads again.
	gen := s.reloadGen.Add(1)
	keys := s.config().Keys
	p := &plans{}
	if keys.File != "" {
		var err error
		if p, err = loadPlans(keys.File, s.hasher); err != nil {
			s.log.Error("keys file reload failed; keeping the old plans", "error", err)
			return err
		}
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	switch now := s.config().Keys; {
	case gen < s.reloaded || now.File != keys.File || now.RedisHash != keys.RedisHash:
		// A reload committed meanwhile: its plans stand (a hash is read by the watcher).
		return nil
	case keys.File != "":
		s.log.Info("reloaded plans", "file", keys.File, "keys", len(p.byKey))
	}
	s.plans.Store(p)
	return nil
}

// redisPlans reads keys.redis_hash, logging what changed; on error it logs and returns
// the error, and the caller keeps the plans it has.
func (s *Server) redisPlans(hash string) (*plans, error) {
	if s.hashes == nil {
		return nil, fmt.Errorf("edge: keys.redis_hash needs redis")
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisPlansTimeout)
	defer cancel()
	p, err := plansFromRedis(ctx, s.hashes, hash, s.hasher)
	if err != nil {
		// Said once per outage; the retries that follow log at debug level.
		lvl := slog.LevelError
		if s.plansFailing.Swap(true) {
			lvl = slog.LevelDebug
		}
		s.log.Log(context.Background(), lvl, "reading the plans from Redis failed; keeping the old plans", "error", err)
		return nil, err
	}
	if s.plansFailing.Swap(false) {
		s.log.Info("plans read from Redis again", "hash", hash)
	}
	if old := s.plans.Load(); old == nil || old.hash != hash || !maps.Equal(old.byKey, p.byKey) {
		s.log.Info("plans loaded from redis", "hash", hash, "keys", len(p.byKey))
	}
	return p, nil
}

// watchFiles reloads keys.file and the certificate files when they change on disk,
// and keys.redis_hash every redisPlansEvery (every tick while the plans in force are
// not from it), until done is closed. It polls (every 2 s) rather than using inotify:
// no dependency, and it works on every filesystem, symlink swaps included.
func (s *Server) watchFiles(done <-chan struct{}) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	certsSeen := fileStamps(s.config().TLS.Certificates)
	every := cmp.Or(s.opts.redisPlansEvery, redisPlansEvery)
	nextRedis := time.Now().Add(every - time.Second)
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			if p := s.plans.Load(); p.file != "" && p.changed() {
				s.ReloadPlans()
			}
			// Read the hash when due, and at every tick while the plans in force are not
			// from it (the read at start or at a reload failed).
			if hash := s.config().Keys.RedisHash; hash != "" && (!now.Before(nextRedis) || s.plans.Load().hash != hash) {
				nextRedis = now.Add(every - time.Second) // half a tick early: the tick that falls due
				s.ReloadPlans()
			}
			if now := fileStamps(s.config().TLS.Certificates); now != certsSeen {
				certsSeen = now
				// A failed reload keeps the old certificates and logs why.
				if err := s.Certs().Reload(); err == nil {
					s.log.Info("certificates reloaded after a change on disk", "spki_pin", s.Certs().Pin())
				}
			}
		}
	}
}

// fileStamps summarizes the modification times and sizes of the certificate files.
func fileStamps(pairs []config.CertPair) string {
	var b []byte
	for _, p := range pairs {
		for _, f := range []string{p.Cert, p.Key} {
			if fi, err := os.Stat(f); err == nil {
				b = fmt.Appendf(b, "%s:%d:%d;", f, fi.ModTime().UnixNano(), fi.Size())
			}
		}
	}
	return string(b)
}
