package acme

import (
	"time"

	"github.com/h3edge/h3edge/certs"
)

// Listing is the body of the admin API's GET /api/v1/certificates: every certificate
// the edge serves, never key material.
type Listing struct {
	Certificates []Listed `json:"certificates"`
	// Missing are ACME domains without a valid certificate yet.
	Missing []string `json:"missing"`
}

// Listed is one certificate of a Listing.
type Listed struct {
	Names    []string  `json:"names"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"not_after"`
	Serial   string    `json:"serial"`
	// Source is "file", "acme" or "development".
	Source string `json:"source"`
}

// List describes what files and m (nil without tls.acme) serve: the files (or the
// development certificate) first, then ACME's. Its slices are never nil, so that they
// encode as [] rather than null.
func List(files *certs.Store, m *Manager) Listing {
	l := Listing{Certificates: []Listed{}, Missing: []string{}}
	for _, c := range files.Certificates() {
		src := "file"
		if c.Development {
			src = "development"
		}
		l.Certificates = append(l.Certificates, Listed{Names: c.Names, Issuer: c.Issuer, NotAfter: c.NotAfter, Serial: c.Serial, Source: src})
	}
	if m != nil {
		for _, c := range m.Certificates() {
			l.Certificates = append(l.Certificates, Listed{Names: c.Names, Issuer: c.Issuer, NotAfter: c.NotAfter, Serial: c.Serial, Source: "acme"})
		}
		l.Missing = append(l.Missing, m.Missing()...)
	}
	return l
}
