// Package certs holds the edge's TLS material: PEM certificate pairs chosen by SNI, a
// self-signed development certificate generated once and cached on disk, and hot reload.
package certs

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Pair names one PEM certificate chain (leaf first) and its private key.
type Pair struct {
	Cert string // path of the PEM certificate chain
	Key  string // path of the PEM private key (PKCS#8, PKCS#1 or SEC 1, unencrypted)
}

// Config configures a Store.
type Config struct {
	// Pairs are the certificates served, chosen by SNI. The first pair is the default
	// for clients that send no SNI or an unknown name. If empty, a self-signed
	// development certificate for localhost, 127.0.0.1 and ::1 is used.
	Pairs []Pair
	// CacheDir is where the development certificate is cached (cert.pem, key.pem).
	// If empty, DefaultCacheDir() is used. Ignored when Pairs is not empty.
	CacheDir string
	// Logger receives the store's logs, with a "component"="certs" attribute.
	// If nil, slog.Default() is used.
	Logger *slog.Logger
}

// Validate reports a pair with an empty path.
func (c Config) Validate() error {
	for i, p := range c.Pairs {
		if p.Cert == "" {
			return fmt.Errorf("certs: pair %d: %w: cert (set both cert and key)", i, ErrEmptyPath)
		}
		if p.Key == "" {
			return fmt.Errorf("certs: pair %d (%s): %w: key (set both cert and key)", i, p.Cert, ErrEmptyPath)
		}
	}
	return nil
}

func (c Config) logger() *slog.Logger {
	l := c.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("component", "certs")
}

// DefaultCacheDir returns $XDG_CACHE_HOME/h3edge, or ~/.cache/h3edge when XDG_CACHE_HOME
// is unset, empty or relative (the XDG rule). Unlike os.UserCacheDir it gives the same
// answer on every OS. It returns "" when neither variable gives a directory.
func DefaultCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "h3edge")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "h3edge")
}

// Store serves certificates to TLS handshakes. It is safe for concurrent use:
// GetCertificate reads an immutable snapshot through an atomic pointer, so handshakes
// never wait for Reload, and connections keep the certificate they started with.
type Store struct {
	pairs []Pair
	dir   string // development certificate cache; used when pairs is empty
	log   *slog.Logger
	now   func() time.Time

	reloadMu sync.Mutex // serializes loads so an older load cannot overwrite a newer one

	cur atomic.Pointer[snapshot]
}

// New loads the configured pairs, or the development certificate when there are none.
// It returns an error naming the broken file when a pair does not load.
func New(cfg Config) (*Store, error) {
	return newStore(cfg, time.Now)
}

func newStore(cfg Config, now func() time.Time) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		pairs: slices.Clone(cfg.Pairs),
		dir:   cfg.CacheDir,
		log:   cfg.logger(),
		now:   now,
	}
	if len(s.pairs) == 0 && s.dir == "" {
		s.dir = DefaultCacheDir()
		if s.dir == "" {
			return nil, fmt.Errorf("certs: %w (set XDG_CACHE_HOME or HOME, or configure certificates)", ErrNoCacheDir)
		}
	}
	snap, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(snap)
	s.logLoaded("certificates loaded", snap)
	return s, nil
}

// GetCertificate picks the certificate for a handshake: an exact DNS name from the
// certificates' SANs (case-insensitive), then a wildcard one label deep, else the
// default (first) certificate. It allocates nothing and never returns an error;
// its signature is tls.Config.GetCertificate's.
func (s *Store) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	snap := s.cur.Load()
	if hello != nil && hello.ServerName != "" {
		if c := snap.match(hello.ServerName); c != nil {
			return c, nil
		}
	}
	return snap.def, nil
}

// Reload re-reads the PEM files (or re-checks the development certificate, which is
// regenerated when it is about to expire) and swaps them in at once. If any file is
// broken it keeps serving the previous certificates, logs why and returns the error: a
// *FileError naming the first broken file.
func (s *Store) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	snap, err := s.load()
	if err != nil {
		s.log.Error("certificate reload failed; still serving the previous certificates", "error", err)
		return err
	}
	s.cur.Store(snap)
	s.logLoaded("certificates reloaded", snap)
	return nil
}

// Pin returns the base64 (standard encoding) SHA-256 of the default certificate's
// SubjectPublicKeyInfo: what Chromium's --ignore-certificate-errors-spki-list takes.
func (s *Store) Pin() string { return s.cur.Load().pin }

// Development reports whether the store serves the generated development certificate.
func (s *Store) Development() bool { return s.cur.Load().dev }

// ServerConfig returns a new tls.Config that takes its certificates from s, with TLS 1.2
// as the minimum and nextProtos as the ALPN list. Each call returns a separate Config
// because quic-go rewrites NextProtos: give the TCP and QUIC listeners one each.
func (s *Store) ServerConfig(nextProtos ...string) *tls.Config {
	return &tls.Config{
		GetCertificate: s.GetCertificate,
		MinVersion:     tls.VersionTLS12,
		NextProtos:     slices.Clone(nextProtos),
	}
}

func (s *Store) load() (*snapshot, error) {
	if len(s.pairs) == 0 {
		c, err := s.loadDev()
		if err != nil {
			return nil, err
		}
		return newSnapshot([]*tls.Certificate{c}, true), nil
	}
	certs := make([]*tls.Certificate, 0, len(s.pairs))
	for _, p := range s.pairs {
		c, err := loadPair(p)
		if err != nil {
			return nil, err // the first problem only, so that the error stays one line
		}
		certs = append(certs, c)
	}
	now := s.now()
	for i, c := range certs {
		if now.After(c.Leaf.NotAfter) {
			s.log.Warn("certificate has expired; clients will refuse it", "file", s.pairs[i].Cert, "not_after", c.Leaf.NotAfter)
		}
	}
	return newSnapshot(certs, false), nil
}

func (s *Store) logLoaded(msg string, snap *snapshot) {
	s.log.Info(msg, "development", snap.dev, "certificates", snap.count,
		"default_names", snap.def.Leaf.DNSNames, "not_after", snap.def.Leaf.NotAfter, "spki_pin", snap.pin)
}

// maxName is the longest DNS name (RFC 1035); longer SNI values match nothing.
const maxName = 253

// snapshot is one load's immutable lookup table.
type snapshot struct {
	def      *tls.Certificate
	all      []*tls.Certificate          // in configuration order, def first
	exact    map[string]*tls.Certificate // lower-case DNS SAN → certificate
	wildcard map[string]*tls.Certificate // "example.com" for a "*.example.com" SAN
	pin      string
	dev      bool
	count    int
}

// newSnapshot indexes certs; when two certificates claim a name, the earlier one wins.
func newSnapshot(certs []*tls.Certificate, dev bool) *snapshot {
	s := &snapshot{
		def:      certs[0],
		all:      certs,
		exact:    make(map[string]*tls.Certificate),
		wildcard: make(map[string]*tls.Certificate),
		dev:      dev,
		count:    len(certs),
	}
	for _, c := range certs {
		for _, name := range c.Leaf.DNSNames {
			name = strings.TrimSuffix(strings.ToLower(name), ".")
			m, key := s.exact, name
			if rest, ok := strings.CutPrefix(name, "*."); ok {
				m, key = s.wildcard, rest
			}
			if _, taken := m[key]; !taken && key != "" {
				m[key] = c
			}
		}
	}
	sum := sha256.Sum256(s.def.Leaf.RawSubjectPublicKeyInfo)
	s.pin = base64.StdEncoding.EncodeToString(sum[:])
	return s
}

// match returns the certificate for an SNI name, or nil. It lower-cases into a stack
// buffer so that it allocates nothing (m[string(b)] does not copy).
func (s *snapshot) match(name string) *tls.Certificate {
	var buf [maxName + 1]byte
	if len(name) > len(buf) {
		return nil
	}
	b := buf[:copy(buf[:], name)]
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	if n := len(b); n > 0 && b[n-1] == '.' {
		b = b[:n-1]
	}
	if c, ok := s.exact[string(b)]; ok {
		return c
	}
	// A wildcard covers exactly one non-empty leftmost label.
	if i := bytes.IndexByte(b, '.'); i > 0 {
		if c, ok := s.wildcard[string(b[i+1:])]; ok {
			return c
		}
	}
	return nil
}
