package edge

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
)

// How keys.redis_hash is read: each read walks the whole hash, so not every 2 s like
// the files, and each is bounded.
const (
	redisPlansEvery   = 10 * time.Second
	redisPlansTimeout = 5 * time.Second
)

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
	p := new(identity.Plans)
	if keys.File != "" {
		var err error
		if p, err = identity.LoadPlans(keys.File, s.hasher); err != nil {
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
		s.log.Info("reloaded plans", "file", keys.File, "keys", p.Len())
	}
	s.plans.Store(p)
	return nil
}

// redisPlans reads keys.redis_hash, logging what changed; on error it logs and returns
// the error, and the caller keeps the plans it has.
func (s *Server) redisPlans(hash string) (*identity.Plans, error) {
	if s.hashes == nil {
		return nil, fmt.Errorf("edge: keys.redis_hash needs redis")
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisPlansTimeout)
	defer cancel()
	p, err := identity.PlansFromRedis(ctx, s.hashes, hash, s.hasher)
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
	if old := s.plans.Load(); old == nil || old.Hash() != hash || !old.SameKeys(p) {
		s.log.Info("plans loaded from redis", "hash", hash, "keys", p.Len())
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
			if p := s.plans.Load(); p.File() != "" && p.Changed() {
				s.ReloadPlans()
			}
			// Read the hash when due, and at every tick while the plans in force are not
			// from it (the read at start or at a reload failed).
			if hash := s.config().Keys.RedisHash; hash != "" && (!now.Before(nextRedis) || s.plans.Load().Hash() != hash) {
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
