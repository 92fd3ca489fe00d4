package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"
)

// selfSignedLifetime is how long a SelfSigned certificate is valid: longer than any
// test or benchmark run.
const selfSignedLifetime = 7 * 24 * time.Hour

// loopbackNames are what a certificate is for when no names are given.
var loopbackNames = []string{"localhost", "127.0.0.1", "::1"}

// SelfSigned returns a new self-signed ECDSA P-256 certificate, with its Leaf set, for
// names: each a DNS name or an IP address; none means localhost, 127.0.0.1 and ::1. It
// is valid from an hour ago (for a little clock skew) for a week, and is its own CA, so
// that a client can trust it as a root. It is for tests, benchmarks and servers on
// loopback, such as the bench's bare baseline; h3edge's development certificate is
// made the same way (see Store), valid for a year and cached on disk.
func SelfSigned(names ...string) (tls.Certificate, error) {
	if len(names) == 0 {
		names = loopbackNames
	}
	c, err := newSelfSigned(selfSignedSpec{
		subject:   pkix.Name{CommonName: names[0]},
		names:     names,
		notBefore: time.Now().Add(-time.Hour),
		lifetime:  selfSignedLifetime,
		ca:        true,
	})
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: self-signed certificate: %w", err)
	}
	return *c, nil
}

// selfSignedSpec is what differs between self-signed certificates.
type selfSignedSpec struct {
	subject   pkix.Name
	names     []string // DNS names and IP addresses
	notBefore time.Time
	lifetime  time.Duration
	ca        bool // may sign: a client can add it to its roots
}

// newSelfSigned makes the certificate spec describes, with a fresh key and a random
// 127-bit serial number.
func newSelfSigned(spec selfSignedSpec) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               spec.subject,
		NotBefore:             spec.notBefore,
		NotAfter:              spec.notBefore.Add(spec.lifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if spec.ca {
		tmpl.IsCA = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	for _, n := range spec.names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
