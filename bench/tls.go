package bench

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// ErrPinMismatch is returned (wrapped) by a TLS handshake whose server certificate does
// not match any of Config.Pins.
var ErrPinMismatch = errors.New("bench: server certificate does not match the SPKI pin")

// SPKIPin returns the certificate's pin: the standard base64 encoding of the SHA-256 of
// its DER SubjectPublicKeyInfo, the form h3edge prints for its development certificate
// and Chromium's --ignore-certificate-errors-spki-list takes.
func SPKIPin(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// parsePins decodes pins given as base64 SHA-256 digests, optionally prefixed
// "sha256/" (curl's --pinnedpubkey form without the second slash also works).
func parsePins(pins []string) ([][sha256.Size]byte, error) {
	out := make([][sha256.Size]byte, 0, len(pins))
	for _, p := range pins {
		p = strings.TrimSpace(p)
		// "sha256/" and curl's "sha256//" both prefix a pin, and a digest's base64 may
		// itself begin with '/': only the length tells "sha256//" + d from "sha256/" + "/…".
		if rest, ok := strings.CutPrefix(p, "sha256/"); ok {
			p = rest
			if len(p) == base64.StdEncoding.EncodedLen(sha256.Size)+1 {
				p = strings.TrimPrefix(p, "/")
			}
		}
		b, err := base64.StdEncoding.DecodeString(p)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("bench: pin %q is not a base64 SHA-256 digest", p)
		}
		out = append(out, [sha256.Size]byte(b))
	}
	return out, nil
}

// TLSConfig builds the client TLS configuration Run shares among all its connections,
// for callers that make their own (the scenarios' floods).
//
// Verification is on by default (RootCAs, or the system roots if nil). With pins, the
// chain and host name are not checked; instead the leaf certificate's SPKI must match a
// pin. Only the leaf counts: it is the certificate whose key signed the handshake, so a
// pinned intermediate without chain verification would prove nothing. Insecure skips
// verification, but pins given as well are still enforced.
func TLSConfig(serverName string, roots *x509.CertPool, pins []string, insecure bool) (*tls.Config, error) {
	tc := &tls.Config{
		ServerName:         serverName,
		RootCAs:            roots,
		InsecureSkipVerify: insecure,
		MinVersion:         tls.VersionTLS12,
	}
	if len(pins) == 0 {
		return tc, nil
	}
	want, err := parsePins(pins)
	if err != nil {
		return nil, err
	}
	tc.InsecureSkipVerify = true // replaced by the pin check below
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return ErrPinMismatch
		}
		got := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
		for _, w := range want {
			if got == w {
				return nil
			}
		}
		return fmt.Errorf("%w (got %s)", ErrPinMismatch, base64.StdEncoding.EncodeToString(got[:]))
	}
	return tc, nil
}
