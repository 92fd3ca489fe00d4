package edge

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/config"
)

// TestACMERenewalUnderLoad: pebble issues 30-second certificates (and refuses 5 % of
// good nonces, which the client must retry); the edge renews in the second half of
// each certificate's life. While two HTTP/3 and two HTTP/2 clients send requests one
// after another (paced to some 200 requests a second each, so as not to starve a shared
// machine), the renewed certificate replaces the old one — new handshakes on both
// protocols see the new serial — and not one request fails.
func TestACMERenewalUnderLoad(t *testing.T) {
	ca := newPebble(t)
	e := newACMEEdge(t, ca, func(c *config.Config) {
		c.TLS.ACME.Challenges = []string{"tls-alpn-01"}
	}, Options{acme: acmeTuning{renewalWindow: 0.5, renewCheck: time.Second}})
	ca.Start(pebbleOptions{TLSPort: e.port, Validity: 30 * time.Second, RejectNonces: true})
	e.serve()
	first := e.waitACME(t, acmeDomain, 60*time.Second).SerialNumber.Text(16)
	roots := ca.Root()
	url := fmt.Sprintf("https://127.0.0.1:%d/", e.port)

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, proto := range []string{"h3", "h3", "h2", "h2"} {
		c := trustingClient(t, proto, roots, acmeDomain)
		wg.Go(func() {
			pace := time.NewTicker(5 * time.Millisecond)
			defer pace.Stop()
			for {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				resp, err := c.Get(url)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s: %s", proto, resp.Status)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", proto, err))
					continue
				}
				ok.Add(1)
			}
		})
	}
	// New handshakes, one per protocol and probe, report the serial served now.
	probe := func(proto string) string {
		tc := &tls.Config{RootCAs: roots, ServerName: acmeDomain}
		var rt http.RoundTripper
		if proto == "h3" {
			tr := &http3.Transport{TLSClientConfig: tc}
			defer tr.Close()
			rt = tr
		} else {
			tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			rt = tr
		}
		resp, err := (&http.Client{Transport: rt, Timeout: 5 * time.Second}).Get(url)
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, fmt.Errorf("probe %s: %w", proto, err))
			return ""
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ok.Add(1)
		return resp.TLS.PeerCertificates[0].SerialNumber.Text(16)
	}
	start := time.Now()
	var renewed string
	testkit.WaitFor(t, 45*time.Second, "a renewed certificate on HTTP/3 and HTTP/2", func() bool {
		time.Sleep(200 * time.Millisecond) // a probe's pace, not a synchronisation
		s3, s2 := probe("h3"), probe("h2")
		if s3 != "" && s3 != first && s3 == s2 {
			renewed = s3
			return true
		}
		return false
	})
	// Keep the load on a little past the swap, then stop.
	until := time.Now().Add(time.Second)
	testkit.WaitFor(t, 5*time.Second, "the load to run past the swap", func() bool { return time.Now().After(until) })
	close(stop)
	wg.Wait()
	t.Logf("renewed %s → %s after %v under load: %d requests, %d failed", first, renewed, time.Since(start), ok.Load(), failed.Load())
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed during renewal; first: %v", n, firstErr.Load())
	}
	if ok.Load() < 1000 {
		t.Fatalf("only %d requests: no load to speak of", ok.Load())
	}
}

// TestACMECADown: once pebble has issued a certificate, it is killed; an edge
// restarted from the same storage serves the stored certificate from its first
// handshake, tries to renew it (its renewal window covers the whole lifetime), and
// logs that failure once — not once per attempt — while it goes on serving.
func TestACMECADown(t *testing.T) {
	ca := newPebble(t)
	storage := t.TempDir()
	first := newACMEEdge(t, ca, func(c *config.Config) { c.TLS.ACME.Storage = storage }, Options{})
	ca.Start(pebbleOptions{TLSPort: first.port, Validity: time.Hour})
	first.serve()
	serial := first.waitACME(t, acmeDomain, 60*time.Second).SerialNumber.Text(16)
	roots := ca.Root()
	first.stop(t)
	ca.Kill()

	start := time.Now()
	e := newACMEEdge(t, ca, func(c *config.Config) { c.TLS.ACME.Storage = storage },
		Options{acme: acmeTuning{renewalWindow: 1, renewCheck: 200 * time.Millisecond}})
	if e.acme.Lookup(acmeDomain) == nil {
		t.Fatal("the stored certificate is not loaded before serving")
	}
	e.serve()
	if got := handshakeEach(t, e.port, roots, acmeDomain); got != serial {
		t.Fatalf("restarted edge served serial %s, stored %s", got, serial)
	}
	t.Logf("stored certificate served on all three protocols %v after the restart", time.Since(start))

	const failure = "ACME renewing failed; serving the certificate in storage"
	testkit.WaitFor(t, 20*time.Second, "the renewal failure logged", func() bool { return strings.Contains(e.log.String(), failure) })
	// Several maintenance rounds later it is still said once.
	rounds := time.Now().Add(2 * time.Second)
	testkit.WaitFor(t, 5*time.Second, "several maintenance rounds", func() bool { return time.Now().After(rounds) })
	if n := strings.Count(e.log.String(), failure); n != 1 {
		t.Fatalf("the renewal failure was logged %d times:\n%s", n, e.log.String())
	}
	if e.acme.Errors() < 1 {
		t.Fatal("the failure was not counted")
	}
	handshakeEach(t, e.port, roots, acmeDomain) // still serving
	var rd admin.Readiness
	adminGet(t, e.Server, "/readyz", &rd)
	if rd.Status != "ready" || rd.Certificates != "ok" {
		t.Fatalf("/readyz with a valid stored certificate and the CA down = %+v", rd)
	}
}
