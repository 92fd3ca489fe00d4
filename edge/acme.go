package edge

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/h3edge/h3edge/certs"
	"github.com/h3edge/h3edge/certs/acme"
	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/metrics"
)

// acmeKeyPrefix is where storage: redis keeps certificates, keys, the ACME account and
// the ordering locks (DESIGN.md §10).
const acmeKeyPrefix = "h3edge:acme:"

// acmeTuning holds settings of the ACME manager that the configuration file does not
// have (Options.acme): tests shorten the renewal schedule with them.
type acmeTuning struct {
	renewalWindow float64       // acme.Config.RenewalWindow
	renewCheck    time.Duration // acme.Config.RenewCheck
}

// initACME builds the ACME manager of tls.acme (nil without it) and loads what its
// storage holds, so that stored certificates are served from the first handshake.
// It runs after initGlobal: storage: redis uses the quota store's connection.
func (s *Server) initACME(cfg *config.Config) error {
	a := cfg.TLS.ACME
	if a == nil {
		return nil
	}
	errors := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "acme_errors_total",
		Help: "Failed attempts to obtain or renew an ACME certificate, or to load one from storage.",
	})
	if err := s.registry.Register(errors); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	var pems [][]byte
	for i, path := range a.CARoots {
		b, err := config.ReadCARoots(path)
		if err != nil {
			return fmt.Errorf("edge: tls.acme.ca_roots[%d]: %w", i, err)
		}
		pems = append(pems, b)
	}
	var roots *x509.CertPool
	if len(pems) > 0 {
		p, err := acme.RootsWith(pems...)
		if err != nil {
			return fmt.Errorf("edge: tls.acme.ca_roots: %w", err)
		}
		roots = p
	}
	mc := acme.Config{
		Domains:       a.Domains,
		Email:         a.Email,
		CA:            a.CA,
		Roots:         roots,
		Challenges:    a.Challenges,
		Logger:        s.baseLog,
		OnError:       errors.Inc,
		RenewalWindow: s.opts.acme.renewalWindow,
		RenewCheck:    s.opts.acme.renewCheck,
	}
	switch a.Storage {
	case config.StorageRedis:
		if s.redis == nil {
			return fmt.Errorf("edge: tls.acme.storage: redis needs redis: configured")
		}
		mc.Blobs = s.redis.Blobs(acmeKeyPrefix)
	case "":
		dir := cmp.Or(s.opts.CertCacheDir, certs.DefaultCacheDir())
		if dir == "" {
			return fmt.Errorf("edge: tls.acme.storage: no cache directory (set XDG_CACHE_HOME or HOME, or give tls.acme.storage a directory)")
		}
		mc.Dir = filepath.Join(dir, "acme")
	default:
		mc.Dir = a.Storage
	}
	m, err := acme.New(mc)
	if err != nil {
		return fmt.Errorf("edge: tls.acme: %w", err)
	}
	if err := m.Load(); err != nil {
		s.log.Warn("ACME storage could not be read at start; serving what loaded", "error", err)
	}
	s.acme = m
	return nil
}

// startACME starts ordering and renewing, once the listeners that answer challenges
// are bound (Serve).
func (s *Server) startACME() {
	if s.acme == nil {
		return
	}
	host, _, _ := net.SplitHostPort(s.config().Listen)
	ln := acme.Listeners{Host: host, TLSPort: s.Addr().Port}
	if addr := s.plainAddr(); addr != nil {
		ln.HTTPPort = addr.Port
	}
	if err := s.acme.Start(ln); err != nil {
		s.log.Warn("ACME started with problems; retrying in the background", "error", err)
	}
}

// getCertificate is the TLS configurations' GetCertificate, for HTTP/3 and TCP alike:
// the files in force and ACME's, as acme.Choose ranks them.
func (s *Server) getCertificate(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return acme.Choose(s.certs.Load(), s.acme, h)
}

// withACMEProtocol adds acme-tls/1 to a TCP listener's ALPN list when tls.acme
// answers TLS-ALPN-01, so that a CA's validation handshake succeeds.
func (s *Server) withACMEProtocol(nextProtos []string) []string {
	if s.acme == nil || len(nextProtos) == 0 || !slices.Contains(s.config().TLS.ACME.Challenges, acme.TLSALPN01) {
		return nextProtos
	}
	return append(slices.Clip(nextProtos), acme.ALPN)
}

// acmeReadiness is /readyz's certificates: "" without tls.acme, "missing" (degraded)
// while a domain has no valid certificate, else "ok".
func (s *Server) acmeReadiness() string {
	switch {
	case s.acme == nil:
		return ""
	case len(s.acme.Missing()) > 0:
		return "missing"
	}
	return "ok"
}

// serveCertificates answers GET /api/v1/certificates: every certificate the edge
// serves, files (or the development certificate) first, then ACME's.
func (s *Server) serveCertificates(w http.ResponseWriter, _ *http.Request) {
	admin.WriteJSON(w, http.StatusOK, acme.List(s.certs.Load(), s.acme))
}
