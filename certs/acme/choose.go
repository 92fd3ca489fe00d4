package acme

import (
	"crypto/tls"

	"github.com/h3edge/h3edge/certs"
)

// Choose is GetCertificate for an edge that serves certificate files (files) and
// ACME's (m; nil without tls.acme) from one TLS configuration: a CA's TLS-ALPN-01
// validation gets its challenge certificate; otherwise a certificate file's names
// win, then ACME's, then the files' default, ACME's first domain, and last the
// development certificate, which files serves when it has no file.
func Choose(files *certs.Store, m *Manager, h *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if m == nil {
		return files.GetCertificate(h)
	}
	if IsChallenge(h) {
		return m.GetCertificate(h)
	}
	dev := files.Development()
	if !dev {
		if c := files.Lookup(h.ServerName); c != nil {
			return c, nil
		}
	}
	if c := m.Lookup(h.ServerName); c != nil {
		return c, nil
	}
	if !dev {
		return files.GetCertificate(h)
	}
	if c := m.Default(); c != nil {
		return c, nil
	}
	return files.GetCertificate(h)
}
