package edge

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/h3edge/h3edge/limiter"
)

// plans maps hashed API keys to plan names. Only hashes are kept: the raw keys of the
// file are dropped once hashed.
type plans struct {
	byKey   map[limiter.Key]string
	file    string
	modTime time.Time
	size    int64
}

// loadPlans reads a keys file: a YAML mapping {api-key: plan}.
func loadPlans(file string, h hasher) (*plans, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("keys.file: %w", err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("keys.file: %w", err)
	}
	var raw map[string]string
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil && len(bytes.TrimSpace(data)) > 0 {
		return nil, fmt.Errorf("keys.file %s: must be a mapping of API key to plan name: %v", file, err)
	}
	p := &plans{byKey: make(map[limiter.Key]string, len(raw)), file: file, modTime: fi.ModTime(), size: fi.Size()}
	for k, plan := range raw {
		if !validKey(k) || k == "" {
			return nil, fmt.Errorf("keys.file %s: a key is empty, longer than 256 bytes or has control characters", file)
		}
		p.byKey[h.key('k', k)] = plan
	}
	return p, nil
}

// changed reports whether the file differs from what was loaded.
func (p *plans) changed() bool {
	fi, err := os.Stat(p.file)
	return err == nil && (!fi.ModTime().Equal(p.modTime) || fi.Size() != p.size)
}

// ReloadPlans re-reads keys.file; on error the old plans stay.
func (s *Server) ReloadPlans() error {
	file := s.config().Keys.File
	if file == "" {
		s.plans.Store(&plans{})
		return nil
	}
	p, err := loadPlans(file, s.hasher)
	if err != nil {
		s.log.Error("keys file reload failed; keeping the old plans", "error", err)
		return err
	}
	s.plans.Store(p)
	s.log.Info("reloaded plans", "file", file, "keys", len(p.byKey))
	return nil
}

// watchFiles reloads keys.file and the certificate files when they change on disk,
// until done is closed. It polls (every 2 s) rather than using inotify: no dependency,
// and it works on every filesystem, symlink swaps included.
func (s *Server) watchFiles(done <-chan struct{}) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	certsSeen := fileStamps(s.config().TLS.Certificates)
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if p := s.plans.Load(); p.file != "" && p.changed() {
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
func fileStamps(pairs []CertPair) string {
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
