package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// ACMEConfig obtains and renews the edge's certificates from an ACME CA (DESIGN.md
// §10): TLS-ALPN-01 answered on Listen, HTTP-01 on HTTPListen.
type ACMEConfig struct {
	// Email is the ACME account's contact address. If empty, the account has none.
	Email string `yaml:"email"`
	// Domains are the DNS names to obtain certificates for, one certificate each.
	// Required; names only (no IP addresses, no wildcards: those need dns-01, which
	// is not built in).
	Domains []string `yaml:"domains"`
	// CA is the ACME directory URL. If empty,
	// https://acme-v02.api.letsencrypt.org/directory (Let's Encrypt) is used.
	CA string `yaml:"ca"`
	// CARoots are PEM files of extra roots to trust for the CA's own TLS (a test CA
	// such as Pebble), beside the system's.
	CARoots []string `yaml:"ca_roots"`
	// Challenges are the challenge types to answer: tls-alpn-01 (on Listen) and
	// http-01 (on HTTPListen). If empty, [tls-alpn-01] is used, and http-01 too when
	// http_listen is set.
	Challenges []string `yaml:"challenges"`
	// Storage is the directory that keeps certificates, their keys and the account
	// (created with mode 0700), or "redis" to keep them in the configured Redis under
	// h3edge:acme:, shared by a fleet with a lock so that one edge orders each
	// certificate. If empty, the directory acme under the cache directory is used.
	Storage string `yaml:"storage"`
}

// The values of ACMEConfig with a meaning of their own.
const (
	// LetsEncrypt is the default ACME directory.
	LetsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"
	// StorageRedis keeps ACME state in Redis.
	StorageRedis = "redis"

	challengeTLSALPN = "tls-alpn-01"
	challengeHTTP    = "http-01"
)

var challengeTypes = []string{challengeTLSALPN, challengeHTTP}

// acmeDefaults fills tls.acme's defaults; ApplyDefaults calls it.
func (c *Config) acmeDefaults() {
	a := c.TLS.ACME
	if a == nil {
		return
	}
	if a.CA == "" {
		a.CA = LetsEncrypt
	}
	if len(a.Challenges) == 0 {
		a.Challenges = []string{challengeTLSALPN}
		if c.HTTPListen != "" {
			a.Challenges = append(a.Challenges, challengeHTTP)
		}
	}
}

// checkACME checks http_listen and tls.acme; Validate calls it. The files of ca_roots
// are read by ValidateFiles.
func (c *Config) checkACME(k *checker) {
	if hl := c.HTTPListen; hl != "" {
		if p := hostPortProblem(hl, true); p != "" {
			k.add("http_listen", `%s, such as ":80" (got %q)`, p, hl)
		} else if sameTCPPort(hl, c.Listen) {
			k.add("http_listen", "must not be the public listen address (%s): plain HTTP needs a port of its own, such as :80", c.Listen)
		} else if c.Admin.Listen != "off" && sameTCPPort(hl, c.Admin.Listen) {
			k.add("http_listen", "must not be the admin listen address (%s)", c.Admin.Listen)
		}
	}
	a := c.TLS.ACME
	if a == nil {
		return
	}
	if a.Email != "" {
		if addr, err := mail.ParseAddress(a.Email); err != nil || addr.Address != a.Email {
			k.add("tls.acme.email", "must be an e-mail address such as ops@example.com (got %q)", a.Email)
		}
	}
	if len(a.Domains) == 0 {
		k.add("tls.acme.domains", "required: the names to obtain certificates for, such as [api.example.com]")
	}
	seen := map[string]int{}
	for i, d := range a.Domains {
		path := fmt.Sprintf("tls.acme.domains[%d]", i)
		if p := domainProblem(d); p != "" {
			k.add(path, "%s (got %q)", p, d)
			continue
		}
		name := strings.ToLower(strings.TrimSuffix(d, "."))
		if j, dup := seen[name]; dup {
			k.add(path, "%q is already tls.acme.domains[%d]", d, j)
			continue
		}
		seen[name] = i
	}
	k.url("tls.acme.ca", a.CA, []string{"https"}, LetsEncrypt)
	for i, r := range a.CARoots {
		if r == "" {
			k.add(fmt.Sprintf("tls.acme.ca_roots[%d]", i), "must be the path of a PEM file of CA certificates")
		}
	}
	for i, ch := range a.Challenges {
		path := fmt.Sprintf("tls.acme.challenges[%d]", i)
		k.enum(path, "challenge type", ch, challengeTypes)
		if slices.Index(a.Challenges, ch) < i {
			k.add(path, "%q is listed twice", ch)
		}
		if ch == challengeHTTP && c.HTTPListen == "" {
			k.add(path, `http-01 needs http_listen, where the CA connects over plain HTTP (port 80): set http_listen: ":80", or answer tls-alpn-01 only`)
		}
	}
	if a.Storage == StorageRedis && c.Redis == nil {
		k.add("tls.acme.storage", "redis needs redis: configure redis.url, redis.cluster or redis.sentinel, or give a directory")
	}
}

// domainProblem checks one name of tls.acme.domains: a DNS name the CA can validate
// over TLS-ALPN-01 or HTTP-01; "" if it is one.
func domainProblem(d string) string {
	name := strings.TrimSuffix(d, ".")
	switch {
	case name == "":
		return "must be a DNS name such as api.example.com"
	case strings.HasPrefix(name, "*."):
		return "a wildcard needs the dns-01 challenge, which h3edge does not have built in; list each name"
	case isIPName(name):
		return "is an IP address; ACME certificates here are for DNS names: use a name that resolves to this edge"
	case len(name) > 253:
		return "is longer than 253 bytes, the longest DNS name"
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "must be a DNS name such as api.example.com: labels of 1 to 63 letters, digits and inner hyphens"
		}
		for i := 0; i < len(label); i++ {
			b := label[i] | 0x20 // lower case for letters
			if !('a' <= b && b <= 'z' || '0' <= label[i] && label[i] <= '9' || label[i] == '-') {
				return "must be a DNS name such as api.example.com: labels of 1 to 63 letters, digits and inner hyphens"
			}
		}
	}
	return ""
}

func isIPName(s string) bool {
	_, err := netip.ParseAddr(strings.Trim(s, "[]"))
	return err == nil
}

// sameTCPPort reports whether two listen addresses would take the same TCP port.
func sameTCPPort(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && ap == bp && ap != "0" && (ah == "" || bh == "" || ah == bh)
}

// validateACMEFiles reads each file of tls.acme.ca_roots, as the server will, and
// reports those it cannot read or that hold no PEM certificate, placed in the file.
func (c *Config) validateACMEFiles() error {
	if c.TLS.ACME == nil {
		return nil
	}
	var errs []FieldError
	for i, r := range c.TLS.ACME.CARoots {
		if r == "" {
			continue // Validate's problem
		}
		path := fmt.Sprintf("tls.acme.ca_roots[%d]", i)
		if _, err := ReadCARoots(r); err != nil {
			errs = append(errs, c.locate(FieldError{Path: path, Problem: err.Error() + "; give a readable PEM file of CA certificates"}))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return sorted(errs)
}

// ErrNoPEMCertificate is returned by ReadCARoots for a file that holds no PEM
// certificate.
var ErrNoPEMCertificate = errors.New("no PEM certificate in the file")

// ReadCARoots reads a PEM file of CA certificates, as tls.acme.ca_roots names them,
// and returns its content; an error when it cannot be read or holds no certificate.
func ReadCARoots(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoPEMCertificate)
	}
	return b, nil
}
