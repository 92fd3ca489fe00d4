package edge

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/certs/acme"
	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/config"
)

const acmeDomain = "api.h3edge.test"

// acmeEdge is an edge whose sockets are bound but which does not serve yet, so that
// a test can point pebble at its ports first.
type acmeEdge struct {
	*Server
	port int
	log  *syncBuffer
	done chan error

	served   bool // set by serve, on the test's goroutine
	stopOnce sync.Once
}

// newACMEEdge makes and binds an edge with tls.acme pointed at ca.
func newACMEEdge(t testing.TB, ca *pebbleCA, mutate func(*config.Config), opts Options) *acmeEdge {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.IP = roomyIP
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.TLS.ACME = &config.ACMEConfig{
		Email:   "ops@h3edge.test",
		Domains: []string{acmeDomain},
		CA:      ca.DirURL,
		CARoots: []string{ca.apiCert},
		Storage: t.TempDir(),
	}
	if mutate != nil {
		mutate(cfg)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	if err := cfg.ValidateFiles(); err != nil {
		t.Fatalf("config files: %v", err)
	}
	buf := &syncBuffer{}
	var w io.Writer = buf
	if testing.Verbose() {
		w = io.MultiWriter(buf, testWriter{t})
	}
	// Debug: certmagic's own lines too (zapToSlog), which the tests hold to the same
	// rule of no private key in the log.
	opts.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.CertCacheDir = certCache(t)
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	e := &acmeEdge{Server: s, port: s.Addr().Port, log: buf, done: make(chan error, 1)}
	t.Cleanup(func() { e.stop(t) })
	return e
}

func (e *acmeEdge) serve() {
	e.served = true
	go func() { e.done <- e.Serve() }()
}

// stop closes the edge (once) and, if it served, checks how Serve ended.
func (e *acmeEdge) stop(t testing.TB) {
	e.stopOnce.Do(func() {
		e.Close()
		if !e.served {
			return
		}
		if err := <-e.done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
}

// waitACME waits until the edge serves an ACME certificate for name.
func (e *acmeEdge) waitACME(t testing.TB, name string, d time.Duration) *x509.Certificate {
	t.Helper()
	testkit.WaitFor(t, d, "a certificate for "+name, func() bool { return e.acme.Lookup(name) != nil })
	return e.acme.Lookup(name).Leaf
}

// trustingClient speaks proto to 127.0.0.1:port with sni as the TLS server name and
// trusts roots only.
func trustingClient(t testing.TB, proto string, roots *x509.CertPool, sni string) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: roots, ServerName: sni}
	var rt http.RoundTripper
	switch proto {
	case "h3":
		tr := &http3.Transport{TLSClientConfig: tc}
		t.Cleanup(func() { tr.Close() })
		rt = tr
	default:
		tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 8}
		tr.Protocols = new(http.Protocols)
		if proto == "h2" {
			tr.Protocols.SetHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		t.Cleanup(tr.CloseIdleConnections)
		rt = tr
	}
	return &http.Client{Transport: rt, Timeout: 10 * time.Second}
}

// handshakeEach checks that an HTTP/3, an HTTP/2 and an HTTP/1.1 client trusting
// roots reach the edge with sni and are served a certificate with serial; it returns
// that serial (hex).
func handshakeEach(t testing.TB, port int, roots *x509.CertPool, sni string) string {
	t.Helper()
	var serial string
	for _, p := range protos {
		c := trustingClient(t, p.name, roots, sni)
		resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/", port))
		if err != nil {
			t.Fatalf("%s with SNI %s: %v", p.name, sni, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Proto != p.want || resp.TLS == nil {
			t.Fatalf("%s: %s %s, TLS %v", p.name, resp.Proto, resp.Status, resp.TLS != nil)
		}
		s := resp.TLS.PeerCertificates[0].SerialNumber.Text(16)
		if serial != "" && s != serial {
			t.Fatalf("%s served serial %s, the others %s", p.name, s, serial)
		}
		serial = s
	}
	return serial
}

// adminGet decodes the admin API's answer at path into v.
func adminGet(t testing.TB, s *Server, path string, v any) int {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// TestACMETLSALPN01: with tls-alpn-01 only, the edge obtains certificates from pebble
// for two names through its own TLS listener (ALPN acme-tls/1), and clients trusting
// pebble's root complete HTTP/3, HTTP/2 and HTTP/1.1 handshakes with
// api.h3edge.test as SNI. A certificate file beside ACME wins for its names
// (www.h3edge.test is in both), the admin API lists all three with their source and
// no key material, /readyz is ready, and the storage directory has mode 0700.
func TestACMETLSALPN01(t *testing.T) {
	ca := newPebble(t)
	dir := t.TempDir()
	filePEM, fileKey := filepath.Join(dir, "site.pem"), filepath.Join(dir, "site.key")
	writeSelfSigned(t, filePEM, fileKey, []string{"files.h3edge.test", "www.h3edge.test"}, nil, false)
	storage := filepath.Join(t.TempDir(), "acme")
	e := newACMEEdge(t, ca, func(c *config.Config) {
		c.TLS.ACME.Domains = []string{acmeDomain, "www.h3edge.test"}
		c.TLS.ACME.Challenges = []string{"tls-alpn-01"}
		c.TLS.ACME.Storage = storage
		c.TLS.Certificates = []config.CertPair{{Cert: filePEM, Key: fileKey}}
	}, Options{})
	ca.Start(pebbleOptions{TLSPort: e.port})
	start := time.Now()
	e.serve()
	leaf := e.waitACME(t, acmeDomain, 60*time.Second)
	e.waitACME(t, "www.h3edge.test", 60*time.Second)
	t.Logf("obtained by TLS-ALPN-01 in %v: serial %s, issuer %q", time.Since(start), leaf.SerialNumber.Text(16), leaf.Issuer.CommonName)

	roots := ca.Root()
	if got := handshakeEach(t, e.port, roots, acmeDomain); got != leaf.SerialNumber.Text(16) {
		t.Fatalf("served serial %s, obtained %s", got, leaf.SerialNumber.Text(16))
	}
	// The file's names win: www.h3edge.test gets the file's certificate.
	filePool := x509.NewCertPool()
	b, _ := os.ReadFile(filePEM)
	filePool.AppendCertsFromPEM(b)
	handshakeEach(t, e.port, filePool, "www.h3edge.test")
	handshakeEach(t, e.port, filePool, "files.h3edge.test")

	var list acme.Listing
	if code := adminGet(t, e.Server, "/api/v1/certificates", &list); code != http.StatusOK {
		t.Fatalf("/api/v1/certificates: %d", code)
	}
	sources := map[string]int{}
	for _, c := range list.Certificates {
		sources[c.Source]++
		if c.Source == "acme" && !strings.HasPrefix(c.Issuer, "Pebble Intermediate") {
			t.Errorf("acme certificate issuer %q", c.Issuer)
		}
	}
	if sources["file"] != 1 || sources["acme"] != 2 || len(list.Missing) != 0 {
		t.Fatalf("/api/v1/certificates = %+v", list)
	}
	raw, _ := json.Marshal(list)
	if strings.Contains(string(raw), "PRIVATE") || strings.Contains(strings.ToLower(string(raw)), "key") {
		t.Fatalf("/api/v1/certificates carries key material: %s", raw)
	}
	var rd admin.Readiness
	adminGet(t, e.Server, "/readyz", &rd)
	if rd.Status != "ready" || rd.Certificates != "ok" {
		t.Fatalf("/readyz = %+v", rd)
	}
	if fi, err := os.Stat(storage); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("storage directory: %v, %v", fi.Mode(), err)
	}
	if strings.Contains(e.log.String(), "PRIVATE KEY") {
		t.Fatal("a private key reached the log")
	}
}

// TestACMEHTTP01: with http-01 only, the edge answers pebble's validation on
// http_listen and serves the certificate on all three protocols; any other plain
// HTTP request is redirected with 308 to the same host and path on https.
func TestACMEHTTP01(t *testing.T) {
	ca := newPebble(t)
	e := newACMEEdge(t, ca, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.TLS.ACME.Challenges = []string{"http-01"}
	}, Options{})
	if p := e.withACMEProtocol([]string{"h2"}); len(p) != 1 {
		t.Fatalf("ALPN %q: acme-tls/1 offered without tls-alpn-01", p)
	}
	hp := e.plainAddr().Port
	ca.Start(pebbleOptions{TLSPort: testkit.Port(t), HTTPPort: hp})
	start := time.Now()
	e.serve()
	leaf := e.waitACME(t, acmeDomain, 60*time.Second)
	t.Logf("obtained by HTTP-01 in %v: serial %s", time.Since(start), leaf.SerialNumber.Text(16))
	if got := handshakeEach(t, e.port, ca.Root(), acmeDomain); got != leaf.SerialNumber.Text(16) {
		t.Fatalf("served serial %s, obtained %s", got, leaf.SerialNumber.Text(16))
	}

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 5 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/items?q=1", hp), strings.NewReader("x"))
	req.Host = acmeDomain
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := fmt.Sprintf("https://%s:%d/v1/items?q=1", acmeDomain, e.port)
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("plain HTTP: %s Location %q, want 308 %q", resp.Status, resp.Header.Get("Location"), want)
	}
	resp, err = noFollow.Get(fmt.Sprintf("http://127.0.0.1:%d/.well-known/acme-challenge/unknown-token", hp))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Fatalf("unknown challenge token: %s, want the redirect", resp.Status)
	}
}

// TestACMEDegradedWithoutCertificate: with the CA unreachable and nothing stored, the
// edge still serves (the development certificate), /readyz says degraded, the admin
// API names the missing domain, and the failure is counted.
func TestACMEDegradedWithoutCertificate(t *testing.T) {
	dead := testkit.Port(t) // nothing listens here
	e := startEdge(t, func(c *config.Config) {
		c.TLS.ACME = &config.ACMEConfig{Domains: []string{acmeDomain}, CA: fmt.Sprintf("https://127.0.0.1:%d/dir", dead), Storage: t.TempDir()}
	})
	var rd admin.Readiness
	if code := adminGet(t, e.Server, "/readyz", &rd); code != http.StatusOK || rd.Status != "degraded" || rd.Certificates != "missing" {
		t.Fatalf("/readyz = %d %+v", code, rd)
	}
	var list acme.Listing
	adminGet(t, e.Server, "/api/v1/certificates", &list)
	if len(list.Missing) != 1 || list.Missing[0] != acmeDomain || len(list.Certificates) != 1 || list.Certificates[0].Source != "development" {
		t.Fatalf("/api/v1/certificates = %+v", list)
	}
	resp, err := clientFor(t, "h3").Get(e.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	testkit.WaitFor(t, 20*time.Second, "an ACME error counted", func() bool { return e.acme.Errors() >= 1 })
	if !strings.Contains(metricsText(t, e.Server), "h3edge_acme_errors_total ") {
		t.Fatal("no h3edge_acme_errors_total in /metrics")
	}
}

// metricsText returns the admin listener's /metrics.
func metricsText(t testing.TB, s *Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
