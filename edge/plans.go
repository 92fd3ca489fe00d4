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

// watchPlans reloads keys.file when it changes, until done is closed.
func (s *Server) watchPlans(done <-chan struct{}) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if p := s.plans.Load(); p.file != "" && p.changed() {
				s.ReloadPlans()
			}
		}
	}
}
