package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestValidateACME: h3edge validate checks the tls.acme block: names, not IPs;
// http-01 needs http_listen; storage: redis needs redis:; and, once the rest is
// valid, that each ca_roots file can be read — every problem as FILE:LINE:COL: field.
func TestValidateACME(t *testing.T) {
	dir := t.TempDir()
	run := func(yaml string) (int, string) {
		t.Helper()
		file := filepath.Join(dir, "acme.yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(binary, "validate", "-config", file).CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), string(out)
		}
		t.Fatal(err)
		return 0, ""
	}
	file := filepath.Join(dir, "acme.yaml")
	code, out := run("tls:\n  acme:\n    domains: [192.0.2.1, api.example.com]\n    challenges: [http-01]\n    storage: redis\n")
	for _, want := range []string{
		file + ":3:15: tls.acme.domains[0]: is an IP address",
		file + ":4:18: tls.acme.challenges[0]: http-01 needs http_listen",
		file + ":5:14: tls.acme.storage: redis needs redis",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}

	code, out = run("http_listen: \":80\"\ntls:\n  acme:\n    domains: [api.example.com]\n    ca_roots: [" + filepath.Join(dir, "missing.pem") + "]\n")
	if want := file + ":5:16: tls.acme.ca_roots[0]: open "; code != 2 || !strings.Contains(out, want) {
		t.Errorf("unreadable ca_roots: exit %d, %q; want 2 and %q", code, out, want)
	}
	roots := filepath.Join(dir, "roots.pem")
	os.WriteFile(roots, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644)
	if code, out = run("http_listen: \":80\"\ntls:\n  acme:\n    domains: [api.example.com]\n    ca_roots: [" + roots + "]\n"); code != 2 || !strings.Contains(out, "no PEM certificate") {
		t.Errorf("ca_roots without a certificate: exit %d, %q", code, out)
	}
	os.WriteFile(roots, selfSignedPEM(t), 0o644)
	if code, out = run("http_listen: \":80\"\ntls:\n  acme:\n    domains: [api.example.com]\n    ca_roots: [" + roots + "]\n"); code != 0 {
		t.Errorf("valid ACME block: exit %d\n%s", code, out)
	}
}

// selfSignedPEM returns a self-signed CA certificate as PEM, standing for a test CA's
// root.
func selfSignedPEM(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
