package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/certs"
)

// The tests here run the built binary, as an operator would.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "h3edge-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "h3edge")
	build := []string{"build", "-o", binary}
	if raceEnabled {
		build = append(build, "-race")
	}
	if out, err := exec.Command("go", append(build, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building h3edge: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// roomyIP is an ip: section that no test client reaches.
const roomyIP = `ip:
  connections: {rate: 100000, burst: 100000}
  streams: {rate: 100000, burst: 100000}
  max_connections: 100000
admin: {listen: "127.0.0.1:0"}
`

// proc is a running h3edge process.
type proc struct {
	cmd  *exec.Cmd
	addr string // 127.0.0.1:PORT
	url  string
	pin  string
	mu   sync.Mutex
	logs strings.Builder
	exit chan error    // the exit status, once
	done chan struct{} // closed when the process has exited
}

var (
	listenRe = regexp.MustCompile(`listen=(\S+)`)
	pinRe    = regexp.MustCompile(`spki_pin=(\S+)`)
)

// startProc runs h3edge with args (plus -listen 127.0.0.1:0 unless given) and waits for
// its start-up summary. env is added to the environment; XDG_CACHE_HOME defaults to a
// fresh directory.
func startProc(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	if !strings.Contains(strings.Join(args, " "), "-listen") {
		args = append(args, "-listen", "127.0.0.1:0")
	}
	if !strings.Contains(strings.Join(args, " "), "-config") {
		// Every test client speaks from 127.0.0.1: raise the per-source budgets
		// (ip:), which are not what these tests are about.
		roomy := filepath.Join(t.TempDir(), "roomy.yaml")
		os.WriteFile(roomy, []byte(roomyIP), 0o644)
		args = append(args, "-config", roomy)
	}
	p := &proc{cmd: exec.Command(binary, args...), exit: make(chan error, 1), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir())
	p.cmd.Env = append(p.cmd.Env, env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if strings.Contains(line, "h3edge serving") {
				p.addr = listenRe.FindStringSubmatch(line)[1]
				if m := pinRe.FindStringSubmatch(line); m != nil {
					p.pin = strings.Trim(m[1], `"`)
				}
				close(ready)
			}
		}
		// Wait after the last read: it closes the pipe.
		p.exit <- p.cmd.Wait()
		close(p.done)
	}()
	select {
	case <-ready:
	case err := <-p.exit:
		t.Fatalf("h3edge exited at start: %v\n%s", err, p.log())
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("h3edge did not start\n%s", p.log())
	}
	p.url = "https://" + p.addr
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		if strings.Contains(p.log(), "WARNING: DATA RACE") {
			t.Error("the race detector reported a data race in h3edge")
		}
		if t.Failed() {
			t.Logf("h3edge log:\n%s", p.log())
		}
	})
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// stop sends sig and returns the exit code.
func (p *proc) stop(t testing.TB, sig os.Signal, within time.Duration) int {
	t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.exit:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("h3edge did not exit within %v after %v", within, sig)
		return -1
	}
}

func client(t testing.TB, proto string) *http.Client {
	tlsConf := &tls.Config{InsecureSkipVerify: true}
	var rt http.RoundTripper
	switch proto {
	case "h3":
		tr := &http3.Transport{TLSClientConfig: tlsConf}
		t.Cleanup(func() { tr.Close() })
		rt = tr
	default:
		tr := &http.Transport{TLSClientConfig: tlsConf, Protocols: new(http.Protocols)}
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

func TestBinaryServesEachProtocol(t *testing.T) {
	p := startProc(t, nil)
	if p.pin == "" {
		t.Error("start-up summary lacks the certificate pin")
	}
	for proto, want := range map[string]string{"h3": "HTTP/3.0", "h2": "HTTP/2.0", "h1": "HTTP/1.1"} {
		resp, err := client(t, proto).Get(p.url + "/")
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		var got struct {
			Proto      string
			ClientAddr string `json:"client_addr"`
		}
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != 200 || got.Proto != want || got.ClientAddr != "127.0.0.1" {
			t.Errorf("%s: status %d, origin saw proto %q from %q", proto, resp.StatusCode, got.Proto, got.ClientAddr)
		}
	}
	if code := p.stop(t, syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// TestVersionNamesGo: the binary says which Go built it, in `h3edge version` and in the
// start-up line, and that Go has the net/http HTTP/2 fixes (README: 1.26.9, 1.27.2).
func TestVersionNamesGo(t *testing.T) {
	out, err := exec.Command(binary, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	if len(f) != 3 || f[0] != "h3edge" || f[2] != runtime.Version() {
		t.Fatalf("h3edge version printed %q, want \"h3edge VERSION %s\"", out, runtime.Version())
	}
	var minor, patch int
	if _, err := fmt.Sscanf(f[2], "go1.%d.%d", &minor, &patch); err != nil || minor < 26 || minor == 26 && patch < 9 || minor == 27 && patch < 2 {
		t.Errorf("built with %s, which lacks the HTTP/2 advisories' fixes", f[2])
	}
	p := startProc(t, nil)
	if logs := p.log(); !strings.Contains(logs, "go="+runtime.Version()) {
		t.Errorf("start-up line does not name the Go version %s:\n%s", runtime.Version(), logs)
	}
}

func TestBinaryProxiesToUpstream(t *testing.T) {
	up, _ := newUpstream(t)
	p := startProc(t, nil, "-upstream", up)
	for _, proto := range []string{"h3", "h2", "h1"} {
		resp, err := client(t, proto).Get(p.url + "/x")
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"xff":"127.0.0.1"`) {
			t.Errorf("%s: status %d body %s", proto, resp.StatusCode, body)
		}
	}
}

// TestStartLineNamesRoutes: with routes configured the start-up line names them and
// their pools, not the demo origin, which then answers nothing.
func TestStartLineNamesRoutes(t *testing.T) {
	up, _ := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "routes.yaml")
	os.WriteFile(cfg, []byte(roomyIP+`upstreams:
  api: {targets: [`+up+`]}
  web: {targets: [`+up+`]}
routes:
  - {name: api, match: {path_prefix: /api/}, upstream: api}
  - {name: web, upstream: web}
`), 0o644)
	if p := startProc(t, nil, "-config", cfg); !strings.Contains(p.log(), `origin="2 routes to 2 upstream pools"`) {
		t.Errorf("with two routes to two pools, the start-up line does not name them:\n%s", p.log())
	}
	if p := startProc(t, nil); !strings.Contains(p.log(), `origin="built-in demo origin"`) {
		t.Errorf("without routes or upstream, the start-up line does not name the demo origin:\n%s", p.log())
	}
}

func TestGracefulShutdownBinary(t *testing.T) {
	up, inflight := newUpstream(t)
	p := startProc(t, nil, "-upstream", up)
	const perProto = 25
	var wg sync.WaitGroup
	codes := make(chan int, 2*perProto)
	for _, proto := range []string{"h3", "h2"} {
		c := client(t, proto)
		for range perProto {
			wg.Go(func() {
				resp, err := c.Get(p.url + "/slow?ms=500")
				if err != nil {
					t.Logf("%s: %v", proto, err)
					codes <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			})
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for inflight.Load() < 2*perProto {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests reached the upstream", inflight.Load())
		}
		time.Sleep(2 * time.Millisecond)
	}
	start := time.Now()
	code := p.stop(t, syscall.SIGTERM, 15*time.Second)
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		if c == 200 {
			ok++
		}
	}
	if ok != 2*perProto {
		t.Errorf("%d of %d in-flight requests got 200", ok, 2*perProto)
	}
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	// The requests end 500 ms after they started; then nothing is left to wait for.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("drained and exited in %v: something waited for the shutdown timeout", d)
	} else {
		t.Logf("drained and exited in %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url+"/", nil)
	if _, err := client(t, "h2").Do(req); err == nil {
		t.Error("served after exit")
	}
}

// newUpstream starts a plain HTTP origin that reports the forwarded fields it saw and
// holds /slow requests for 500 ms, counting those it holds.
func newUpstream(t testing.TB) (string, *atomic.Int64) {
	var n atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			n.Add(1)
			defer n.Add(-1)
			select {
			case <-time.After(500 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		json.NewEncoder(w).Encode(map[string]string{"xff": r.Header.Get("X-Forwarded-For"), "via": r.Header.Get("Via")})
	}))
	t.Cleanup(up.Close)
	return up.URL, &n
}

func TestValidateCommand(t *testing.T) {
	file := filepath.Join("..", "..", "edge", "config", "testdata", "config", "four-mistakes.yaml")
	cmd := exec.Command(binary, "validate", "-config", file)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want code 2\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	place := regexp.MustCompile(`^` + regexp.QuoteMeta(file) + `:\d+:\d+: [a-z_.\[\]0-9]+: .+`)
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if !place.MatchString(l) {
			t.Errorf("line %q is not FILE:LINE:COL: field: problem", l)
		}
	}

	// A route naming a pool that does not exist, told at its line (issue 12).
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	os.WriteFile(routes, []byte("upstreams:\n  api: {targets: [http://127.0.0.1:9000]}\nroutes:\n  - name: api\n    upstream: apl\n"), 0o644)
	out, err = exec.Command(binary, "validate", "-config", routes).CombinedOutput()
	if want := routes + `:5:15: routes[0].upstream: unknown upstream "apl"; use one of api`; !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.HasPrefix(string(out), want) {
		t.Errorf("unknown upstream: %v\n%s\nwant %s…", err, out, want)
	}

	// A target URL with a path, and a route an earlier one shadows, each at its line.
	shadowed := filepath.Join(t.TempDir(), "shadowed.yaml")
	os.WriteFile(shadowed, []byte("upstreams:\n  api: {targets: [http://127.0.0.1:9000/v1]}\nroutes:\n"+
		"  - name: all\n    match: {path_prefix: /}\n    upstream: api\n"+
		"  - name: v1\n    match: {path_prefix: /v1/}\n    upstream: api\n"), 0o644)
	out, err = exec.Command(binary, "validate", "-config", shadowed).CombinedOutput()
	wantLines := []string{
		shadowed + `:2:19: upstreams.api.targets[0]: must be scheme://host:port only: a target has no path or query`,
		shadowed + `:8:5: routes[1].match: can never match: routes[0] (all) comes first and matches every request this one does`,
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || len(got) != len(wantLines) {
		t.Errorf("path and shadowed route: %v\n%s\nwant exit 2 and %d lines", err, out, len(wantLines))
	} else {
		for i, w := range wantLines {
			if !strings.HasPrefix(got[i], w) {
				t.Errorf("line %d: %s\nwant %s…", i, got[i], w)
			}
		}
	}

	good := filepath.Join(t.TempDir(), "good.yaml")
	os.WriteFile(good, []byte("listen: \":9443\"\nupstream: http://127.0.0.1:9000\n"), 0o644)
	if out, err := exec.Command(binary, "validate", "-config", good).CombinedOutput(); err != nil {
		t.Errorf("valid file: %v\n%s", err, out)
	}
	if out, err := exec.Command(binary, "-listen", "nonsense").CombinedOutput(); err == nil || !strings.Contains(string(out), "listen") {
		t.Errorf("bad flag value: %v\n%s", err, out)
	} else if errors.As(err, &ee) && ee.ExitCode() != 2 {
		t.Errorf("bad flag value: exit %d, want 2", ee.ExitCode())
	}
}

// TestHelpAndPortInUse: -h names every command and exits 0; a port in use is said once
// ("listen tcp ADDR: bind: address already in use", not "listen tcp …: listen tcp …").
func TestHelpAndPortInUse(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"serve", "-h"}, {"validate", "-h"}} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err != nil {
			t.Errorf("h3edge %s: %v, want exit 0", strings.Join(args, " "), err)
		}
		for _, cmd := range []string{"h3edge validate -config FILE", "h3edge version", "-upstream"} {
			if !strings.Contains(string(out), cmd) {
				t.Errorf("h3edge %s does not mention %q:\n%s", strings.Join(args, " "), cmd, out)
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out, err := exec.Command(binary, "-listen", ln.Addr().String(), "-admin", "127.0.0.1:0").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("port in use: %v, want exit 1\n%s", err, out)
	}
	if n := strings.Count(string(out), "listen tcp"); n != 1 || !strings.Contains(string(out), "address already in use") {
		t.Errorf("port in use said %d times, want once with the reason:\n%s", n, out)
	}
}

func TestDevelopmentCertificateReused(t *testing.T) {
	cache := t.TempDir()
	env := []string{"XDG_CACHE_HOME=" + cache}
	first := startProc(t, env)
	first.stop(t, syscall.SIGTERM, 15*time.Second)
	second := startProc(t, env)
	if first.pin == "" || first.pin != second.pin {
		t.Errorf("pins differ across restarts: %q then %q", first.pin, second.pin)
	}
}

// writePair writes a self-signed certificate for name (a DNS name or an IP address) to
// dir and returns the file paths and the certificate's DER bytes. The certificate is
// its own CA, so a client can trust it as a root (TestRedisTLS does).
func writePair(t testing.TB, dir, name string) (certFile, keyFile string, der []byte) {
	t.Helper()
	c, err := certs.SelfSigned(name)
	if err != nil {
		t.Fatal(err)
	}
	der = c.Certificate[0]
	kb, _ := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile, der
}

// servedCert returns the leaf certificate the server presents for serverName.
func servedCert(t testing.TB, addr, serverName string) []byte {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: serverName})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Raw
}

func TestCertificatesSNIAndReload(t *testing.T) {
	dir := t.TempDir()
	aCert, aKey, aDER := writePair(t, dir, "a.test")
	bCert, bKey, bDER := writePair(t, dir, "b.test")
	cfg := filepath.Join(dir, "h3edge.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "tls:\n  certificates:\n    - {cert: %s, key: %s}\n    - {cert: %s, key: %s}\n%s",
		aCert, aKey, bCert, bKey, roomyIP), 0o644)
	p := startProc(t, nil, "-config", cfg)
	if !bytes.Equal(servedCert(t, p.addr, "b.test"), bDER) || !bytes.Equal(servedCert(t, p.addr, "a.test"), aDER) {
		t.Fatal("SNI did not pick the matching certificate")
	}

	// A broken file on SIGHUP: the old certificate keeps being served.
	os.WriteFile(bCert, []byte("not a certificate"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, "still serving the previous certificates")
	if !bytes.Equal(servedCert(t, p.addr, "b.test"), bDER) {
		t.Error("a broken certificate file replaced the served certificate")
	}
	resp, err := client(t, "h3").Get(p.url + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP/3 after a failed reload: %v", err)
	}
	resp.Body.Close()

	// A good new file on SIGHUP is served from then on.
	_, _, newDER := writePair(t, dir, "b.test")
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, "configuration reloaded")
	if !bytes.Equal(servedCert(t, p.addr, "b.test"), newDER) {
		t.Error("the reloaded certificate is not served")
	}

	// A certificate file replaced on disk is picked up without a signal. (The log line
	// alone proves nothing here: the watcher may already have logged it for the files
	// the SIGHUP steps wrote.)
	_, _, thirdDER := writePair(t, dir, "b.test")
	for deadline := time.Now().Add(10 * time.Second); !bytes.Equal(servedCert(t, p.addr, "b.test"), thirdDER); {
		if time.Now().After(deadline) {
			t.Fatalf("the certificate changed on disk is not served after 10 s:\n%s", p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitLog(t, p, "certificates reloaded after a change on disk")
}

// waitLog polls the process log for text.
func waitLog(t testing.TB, p *proc, text string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.log(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q:\n%s", text, p.log())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestExampleConfig keeps the README's example file valid, and its keys file, from the
// repository's root as the README runs it.
func TestExampleConfig(t *testing.T) {
	cmd := exec.Command(binary, "validate", "-config", "cmd/h3edge/testdata/example.yaml")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
