package edge

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
)

// pebbleCA is Debian's pebble, a test ACME CA, started by a test on free loopback
// ports with pebble-challtestsrv as its DNS server answering every name with
// 127.0.0.1, so that it validates names such as api.h3edge.test against the edge.
// Its own API certificate is made here (apiCert, for tls.acme.ca_roots); the root it
// signs issued certificates with is made anew at every start (Root).
type pebbleCA struct {
	t       testing.TB
	dir     string
	apiCert string // PEM file of pebble's API certificate: the root to trust for it
	DirURL  string // the ACME directory, https://127.0.0.1:PORT/dir
	mgmt    string // the management API, https://127.0.0.1:PORT
	dns     string // pebble-challtestsrv's DNS address
	cmd     *exec.Cmd
	log     *syncBuffer
}

// pebbleOptions configure a pebbleCA.
type pebbleOptions struct {
	TLSPort, HTTPPort int // where it validates TLS-ALPN-01 and HTTP-01: the edge's ports
	Validity          time.Duration
	// RejectNonces leaves pebble's default of refusing 5 % of good nonces on, which
	// ACME clients must survive by retrying.
	RejectNonces bool
}

// pebbleBinaries returns the paths of pebble and pebble-challtestsrv, skipping the test
// without them locally and failing it under CI=true (.ci/run installs them).
func pebbleBinaries(t testing.TB) (string, string) {
	t.Helper()
	return testkit.Need(t, "pebble"), testkit.Need(t, "pebble-challtestsrv")
}

// newPebble writes pebble's configuration and API certificate and starts its DNS
// server; Start starts pebble itself (its ports are known before, for tls.acme.ca).
func newPebble(t testing.TB) *pebbleCA {
	t.Helper()
	_, chall := pebbleBinaries(t)
	p := &pebbleCA{t: t, dir: t.TempDir(), log: &syncBuffer{}}
	p.apiCert = filepath.Join(p.dir, "pebble.pem")
	writeSelfSigned(t, p.apiCert, filepath.Join(p.dir, "pebble.key"), []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}, true)
	p.DirURL = fmt.Sprintf("https://127.0.0.1:%d/dir", testkit.Port(t))
	p.mgmt = fmt.Sprintf("https://127.0.0.1:%d", testkit.Port(t))

	dns := fmt.Sprintf("127.0.0.1:%d", testkit.Port(t))
	cmd := exec.Command(chall, "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-dns01", dns,
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-management", fmt.Sprintf("127.0.0.1:%d", testkit.Port(t)))
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p.dns = dns
	return p
}

// Start starts pebble, validating on the edge's ports, and waits for its directory.
func (p *pebbleCA) Start(o pebbleOptions) {
	t := p.t
	t.Helper()
	pebbleBin, _ := pebbleBinaries(t)
	host := func(u string) string { return strings.TrimSuffix(strings.TrimPrefix(u, "https://"), "/dir") }
	conf := map[string]any{"pebble": map[string]any{
		"listenAddress":                  host(p.DirURL),
		"managementListenAddress":        host(p.mgmt),
		"certificate":                    p.apiCert,
		"privateKey":                     filepath.Join(p.dir, "pebble.key"),
		"httpPort":                       o.HTTPPort,
		"tlsPort":                        o.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"certificateValidityPeriod":      uint64(o.Validity / time.Second),
	}}
	b, _ := json.Marshal(conf)
	confPath := filepath.Join(p.dir, "pebble.json")
	if err := os.WriteFile(confPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(pebbleBin, "-config", confPath, "-dnsserver", p.dns)
	p.cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_AUTHZREUSE=0")
	if !o.RejectNonces {
		p.cmd.Env = append(p.cmd.Env, "PEBBLE_WFE_NONCEREJECT=0")
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	c := p.client()
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := c.Get(p.DirURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble's directory did not answer within 10 s (%v); its log:\n%s", err, p.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops pebble at once, as a CA outage.
func (p *pebbleCA) Kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

// client trusts pebble's API certificate.
func (p *pebbleCA) client() *http.Client {
	pool := x509.NewCertPool()
	b, err := os.ReadFile(p.apiCert)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		p.t.Fatalf("pebble API certificate: %v", err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// Root returns the root that signs the certificates pebble issues, from its
// management API.
func (p *pebbleCA) Root() *x509.CertPool {
	p.t.Helper()
	resp, err := p.client().Get(p.mgmt + "/roots/0")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		p.t.Fatalf("pebble root: %q", b)
	}
	return pool
}

// Orders counts the orders pebble has taken (its log says "Added order" for each).
func (p *pebbleCA) Orders() int { return strings.Count(p.log.String(), "Added order") }

// writeSelfSigned writes a self-signed ECDSA certificate for names and ips (a CA
// certificate when ca) and its key as PEM.
func writeSelfSigned(t testing.TB, certPath, keyPath string, names []string, ips []net.IP, ca bool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names, IPAddresses: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:        ca, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}
