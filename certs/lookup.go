package certs

import (
	"crypto/tls"
	"time"
)

// Lookup returns the certificate whose SANs hold name (exact, then a one-label
// wildcard), or nil: unlike GetCertificate it does not fall back to the default, so
// that a caller with other certificates (ACME) can tell a match from a default.
func (s *Store) Lookup(name string) *tls.Certificate {
	if name == "" {
		return nil
	}
	return s.cur.Load().match(name)
}

// Info describes one certificate the store serves, without key material.
type Info struct {
	Names    []string // DNS SANs, then IP SANs
	Issuer   string   // the issuer's common name
	NotAfter time.Time
	Serial   string // hex
	// Development tells the generated development certificate from a file's.
	Development bool
}

// Certificates describes the certificates served, the default first.
func (s *Store) Certificates() []Info {
	snap := s.cur.Load()
	out := make([]Info, 0, len(snap.all))
	for _, c := range snap.all {
		l := c.Leaf
		names := append([]string(nil), l.DNSNames...)
		for _, ip := range l.IPAddresses {
			names = append(names, ip.String())
		}
		out = append(out, Info{Names: names, Issuer: l.Issuer.CommonName, NotAfter: l.NotAfter,
			Serial: l.SerialNumber.Text(16), Development: snap.dev})
	}
	return out
}
