// Package acme obtains and renews the edge's certificates from an ACME CA (Let's
// Encrypt by default) with github.com/caddyserver/certmagic: TLS-ALPN-01 answered
// through the edge's own TLS listener, HTTP-01 through its plain HTTP one, renewal in
// the background ahead of expiry, failures retried with backoff while the stored
// certificates go on being served. State lives in a directory or in a shared store
// (Blobs: Redis), whose lock lets one edge of a fleet order each certificate while the
// others pick it up. It knows no HTTP server: the edge calls GetCertificate from its
// TLS configurations and HandleHTTPChallenge from its plain HTTP handler.
package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
)

// The challenge types of Config.Challenges.
const (
	TLSALPN01 = "tls-alpn-01"
	HTTP01    = "http-01"
)

// ALPN is the protocol a TLS listener must offer (beside h2 and http/1.1) for
// TLS-ALPN-01 challenges to reach GetCertificate.
const ALPN = "acme-tls/1"

// Config configures a Manager.
type Config struct {
	// Domains are the DNS names to manage, one certificate each. Required.
	Domains []string
	// Email is the ACME account's contact. If empty, the account has none.
	Email string
	// CA is the ACME directory URL. Required.
	CA string
	// Roots, if not nil, are the roots trusted for the CA's own TLS (the system's
	// plus any extra ones, see RootsWith). If nil, the system's.
	Roots *x509.CertPool
	// Challenges are the challenge types answered: TLSALPN01, HTTP01. At least one.
	Challenges []string
	// Dir is the directory that holds certificates, keys and the ACME account, made
	// with mode 0700. Ignored when Blobs is set; one of the two is required.
	Dir string
	// Blobs is a shared store (Redis) that holds them instead of Dir, with a lock so
	// that one process of those sharing it orders each certificate.
	Blobs Blobs
	// Logger receives the manager's logs, with a "component"="acme" attribute; the
	// library's own lines go to it at Debug. If nil, slog.Default() is used.
	Logger *slog.Logger
	// OnError is called once for each failed attempt to obtain or renew a
	// certificate, or to load one from storage. If nil, failures are only logged.
	OnError func()
	// RenewalWindow is the fraction of a certificate's lifetime, counted back from
	// its expiry, in which it is renewed (unless the CA's renewal information, ARI,
	// says when). If zero, 1/3 is used.
	RenewalWindow float64
	// RenewCheck is how often certificates are checked for renewal. If zero, 10m is
	// used.
	RenewCheck time.Duration
}

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	switch {
	case len(c.Domains) == 0:
		return errors.New("acme: no domains")
	case c.CA == "":
		return errors.New("acme: no CA directory URL")
	case c.Dir == "" && c.Blobs == nil:
		return errors.New("acme: no storage: set Dir or Blobs")
	case len(c.Challenges) == 0:
		return errors.New("acme: no challenge types")
	}
	for _, ch := range c.Challenges {
		if ch != TLSALPN01 && ch != HTTP01 {
			return fmt.Errorf("acme: unknown challenge type %q", ch)
		}
	}
	return nil
}

// RootsWith returns the system's roots plus the PEM certificates in each of pems
// (Config.Roots); an error if one holds none.
func RootsWith(pems ...[]byte) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	for i, p := range pems {
		if !pool.AppendCertsFromPEM(p) {
			return nil, fmt.Errorf("acme: roots %d: no PEM certificate", i)
		}
	}
	return pool, nil
}

// Manager keeps one certificate per domain obtained and renewed. Create it with New,
// start it with Start once the listeners that answer challenges are bound, and stop
// it with Close. Its methods are safe for concurrent use; GetCertificate reads the
// library's in-memory cache, which a renewal replaces at once, so a handshake after
// a renewal gets the new certificate and open connections keep theirs.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	magic  *certmagic.Config
	cache  *certmagic.Cache
	issuer *certmagic.ACMEIssuer
	out    *outages

	loaded  atomic.Bool
	started atomic.Bool
	unread  []string // domains whose storage Load could not read; set before Start
	errors  atomic.Uint64

	ctx       context.Context // ends with Close, and with it all ACME work
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// New prepares a Manager: storage (the directory is created) and the ACME issuer.
// It contacts no CA; Start does.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{cfg: cfg, log: log.With("component", "acme")}
	m.cfg.Domains = slices.Clone(cfg.Domains)
	for i, d := range m.cfg.Domains {
		m.cfg.Domains[i] = strings.ToLower(strings.TrimSuffix(d, "."))
	}
	m.out = &outages{m: m, failures: make(map[string]int)}

	var storage certmagic.Storage
	if cfg.Blobs != nil {
		storage = newBlobStorage(cfg.Blobs)
	} else {
		// 0700: the directory holds private keys. MkdirAll leaves an existing one's
		// mode alone, so set it.
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("acme: storage: %w", err)
		}
		if err := os.Chmod(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("acme: storage: %w", err)
		}
		storage = &certmagic.FileStorage{Path: cfg.Dir}
	}
	zl := zapToSlog(m.log)
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return m.magic, nil },
		RenewCheckInterval: cfg.RenewCheck,
		// OCSP: not stapled (below), so checking it is only outbound traffic.
		OCSPCheckInterval: 24 * time.Hour,
		Logger:            zl,
	})
	m.magic = certmagic.New(m.cache, certmagic.Config{
		RenewalWindowRatio: cfg.RenewalWindow,
		OnEvent:            m.out.onEvent,
		Storage:            storage,
		// Let's Encrypt ended OCSP in 2025; stapling would only add requests to a
		// responder at load time, when the CA may be down.
		OCSP:   certmagic.OCSPConfig{DisableStapling: true},
		Logger: zl,
	})
	m.issuer = certmagic.NewACMEIssuer(m.magic, certmagic.ACMEIssuer{
		CA:                      cfg.CA,
		Email:                   cfg.Email,
		Agreed:                  true, // configuring tls.acme is agreeing to the CA's terms (README)
		DisableTLSALPNChallenge: !slices.Contains(cfg.Challenges, TLSALPN01),
		DisableHTTPChallenge:    !slices.Contains(cfg.Challenges, HTTP01),
		TrustedRoots:            cfg.Roots,
		Logger:                  zl,
	})
	m.magic.Issuers = []certmagic.Issuer{m.issuer}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Listeners says where the edge answers challenges, for Start: the host its
// listeners bind ("" for all) and the TLS and plain HTTP ports (0: none).
type Listeners struct {
	Host     string
	TLSPort  int
	HTTPPort int
}

// Load reads the certificates storage has into memory, so that they are served from
// now on; it contacts no CA. A storage problem other than a missing certificate is
// logged, counted and returned after every domain has been tried. Start calls it
// unless it was called before.
func (m *Manager) Load() error {
	if !m.loaded.CompareAndSwap(false, true) {
		return errors.New("acme: Load called twice")
	}
	var errs []error
	for _, d := range m.cfg.Domains {
		if err := m.loadOne(d); err != nil {
			m.countError()
			m.log.Error("cannot read the certificate's storage; retrying in the background", "domain", d, "error", err)
			m.unread = append(m.unread, d)
			errs = append(errs, fmt.Errorf("acme: %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// loadOne caches the stored certificate of d; nil also when storage has none.
func (m *Manager) loadOne(d string) error {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	_, err := m.magic.CacheManagedCertificate(ctx, d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Backoff of retryStorage: from storageRetry doubling up to storageRetryMax.
const (
	storageRetry    = 5 * time.Second
	storageRetryMax = 5 * time.Minute
)

// retryStorage reads storage again for the domains Load could not read (a shared
// store that was down at start), with backoff, and manages each once it can: without
// it, certmagic would never manage them, taking the storage error for its answer.
func (m *Manager) retryStorage(domains []string) {
	wait := storageRetry
	for len(domains) > 0 {
		t := time.NewTimer(wait)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		var left []string
		for _, d := range domains {
			if err := m.loadOne(d); err != nil {
				m.countError()
				m.log.Debug("storage still unreadable", "domain", d, "error", err)
				left = append(left, d)
				continue
			}
			m.log.Info("storage readable again", "domain", d)
			if err := m.magic.ManageAsync(m.ctx, []string{d}); err != nil {
				m.log.Error("cannot manage the certificate", "domain", d, "error", err)
			}
		}
		domains, wait = left, min(2*wait, storageRetryMax)
	}
}

// Start loads what storage has (unless Load did), then obtains the missing
// certificates and renews the others in the background. ln says where the edge
// answers challenges: the library is told those ports so that it never binds a
// listener of its own (it finds them taken and relies on the edge). Storage
// problems are returned as Load's; the background work goes on regardless.
func (m *Manager) Start(ln Listeners) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("acme: Start called twice")
	}
	m.issuer.ListenHost = ln.Host
	m.issuer.AltTLSALPNPort = ln.TLSPort
	m.issuer.AltHTTPPort = ln.HTTPPort
	var errs []error
	if !m.loaded.Load() {
		errs = append(errs, m.Load())
	}
	// Stored certificates are managed now (renewed by the maintenance loop); the
	// others are obtained in the background, with certmagic's retries and backoff;
	// those whose storage could not be read are retried until it can.
	var readable []string
	for _, d := range m.cfg.Domains {
		if !slices.Contains(m.unread, d) {
			readable = append(readable, d)
		}
	}
	if err := m.magic.ManageAsync(m.ctx, readable); err != nil {
		errs = append(errs, fmt.Errorf("acme: %w", err))
	}
	if len(m.unread) > 0 {
		go m.retryStorage(slices.Clone(m.unread))
	}
	return errors.Join(errs...)
}

// Close stops renewals and any order in progress. The certificates stay in storage.
// Calling it again does nothing.
func (m *Manager) Close() {
	m.closeOnce.Do(func() {
		m.cancel()
		m.cache.Stop()
	})
}

// Domains returns the managed names, lower-case. The slice must not be modified.
func (m *Manager) Domains() []string { return m.cfg.Domains }

// IsChallenge reports whether a handshake is a CA's TLS-ALPN-01 validation: it
// offers exactly the protocol ALPN.
func IsChallenge(hello *tls.ClientHelloInfo) bool {
	return len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == ALPN
}

// GetCertificate answers TLS-ALPN-01 validations (see IsChallenge) with their
// challenge certificate, held in memory or, for an order another edge placed, in the
// shared storage; for any other handshake it returns the valid certificate of the
// SNI name, or nil and no error when it has none (the caller falls back).
func (m *Manager) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if IsChallenge(hello) {
		return m.magic.GetCertificate(hello)
	}
	return m.Lookup(hello.ServerName), nil
}

// Lookup returns the valid certificate this manager has for name, or nil.
func (m *Manager) Lookup(name string) *tls.Certificate {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" {
		return nil
	}
	now := time.Now()
	var best *certmagic.Certificate
	for _, c := range m.cache.AllMatchingCertificates(name) {
		if c.Leaf == nil || !c.Leaf.NotAfter.After(now) || !slices.Contains(c.Names, name) {
			continue
		}
		if best == nil || c.Leaf.NotAfter.After(best.Leaf.NotAfter) {
			best = &c
		}
	}
	if best == nil {
		return nil
	}
	return &best.Certificate
}

// Default returns the certificate of the first domain that has a valid one, for
// handshakes without SNI or with an unknown name; nil if none has.
func (m *Manager) Default() *tls.Certificate {
	for _, d := range m.cfg.Domains {
		if c := m.Lookup(d); c != nil {
			return c
		}
	}
	return nil
}

// HandleHTTPChallenge answers an HTTP-01 validation request
// (/.well-known/acme-challenge/TOKEN) for an order of this edge or of another that
// shares its storage, and reports whether it did; false leaves w untouched.
func (m *Manager) HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	return m.issuer.HandleHTTPChallenge(w, r)
}

// Info describes one certificate served, without key material.
type Info struct {
	Names    []string
	Issuer   string // the issuing CA certificate's common name
	NotAfter time.Time
	Serial   string // hex
}

// Certificates describes the certificate served for each domain that has one.
func (m *Manager) Certificates() []Info {
	var out []Info
	for _, d := range m.cfg.Domains {
		c := m.Lookup(d)
		if c == nil {
			continue
		}
		out = append(out, Info{
			Names:    slices.Clone(c.Leaf.DNSNames),
			Issuer:   c.Leaf.Issuer.CommonName,
			NotAfter: c.Leaf.NotAfter,
			Serial:   c.Leaf.SerialNumber.Text(16),
		})
	}
	return out
}

// Missing returns the domains that have no valid certificate now.
func (m *Manager) Missing() []string {
	var out []string
	for _, d := range m.cfg.Domains {
		if m.Lookup(d) == nil {
			out = append(out, d)
		}
	}
	return out
}

// Errors returns how many attempts have failed so far (as OnError was called).
func (m *Manager) Errors() uint64 { return m.errors.Load() }

func (m *Manager) countError() {
	m.errors.Add(1)
	if m.cfg.OnError != nil {
		m.cfg.OnError()
	}
}
