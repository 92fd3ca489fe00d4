package edge

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/config"
)

// TestACMEFleet: three edges share one Redis (storage: redis) and one domain. The
// shared lock lets one of them order, pebble sees exactly one order, and all three
// serve the same certificate (same serial) within 10 s. Pebble validates on the first
// edge's port only, and the first edge starts serving only once another holds the
// ordering lock: it answers the challenge of an order it did not place, from the
// shared storage. Everything lives under h3edge:acme:, and no private key is logged,
// not even at Debug.
func TestACMEFleet(t *testing.T) {
	r := testkit.StartRedis(t)
	ca := newPebble(t)
	var edges []*acmeEdge
	for range 3 {
		edges = append(edges, newACMEEdge(t, ca, func(c *config.Config) {
			c.Redis = &config.RedisConfig{URL: r.URL()}
			c.TLS.ACME.Storage = config.StorageRedis
			c.TLS.ACME.Challenges = []string{"tls-alpn-01"}
		}, Options{}))
	}
	ca.Start(pebbleOptions{TLSPort: edges[0].port})
	start := time.Now()
	edges[1].serve()
	edges[2].serve()
	rc := redisClient(t, r)
	testkit.WaitFor(t, 10*time.Second, "an edge to hold the ordering lock", func() bool {
		locks, _ := rc.Keys(context.Background(), acmeKeyPrefix+"lock:issue_cert_*").Result()
		return len(locks) > 0
	})
	edges[0].serve()
	serials := make([]string, len(edges))
	testkit.WaitFor(t, 10*time.Second, "every edge to serve a certificate", func() bool {
		for i, e := range edges {
			c := e.acme.Lookup(acmeDomain)
			if c == nil {
				return false
			}
			serials[i] = c.Leaf.SerialNumber.Text(16)
		}
		return serials[0] == serials[1] && serials[1] == serials[2]
	})
	took := time.Since(start)
	roots := ca.Root()
	for i, e := range edges {
		if got := handshakeEach(t, e.port, roots, acmeDomain); got != serials[0] {
			t.Fatalf("edge %d serves serial %s, the fleet %s", i, got, serials[0])
		}
	}
	if n := ca.Orders(); n != 1 {
		t.Fatalf("pebble took %d orders for one domain and three edges, want 1", n)
	}
	t.Logf("three edges serve serial %s %v after start; pebble took %d order", serials[0], took, ca.Orders())

	if strings.Contains(edges[0].log.String(), "certificate obtained") {
		t.Fatal("the first edge ordered, though it started after another held the lock")
	}
	keys, err := rc.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var acmeKeys int
	for _, k := range keys {
		if strings.HasPrefix(k, acmeKeyPrefix) {
			acmeKeys++
		} else if strings.Contains(k, "acme") || strings.Contains(k, "certificates/") {
			t.Errorf("ACME state outside %s: %s", acmeKeyPrefix, k)
		}
	}
	if acmeKeys < 3 { // at least the certificate, its key and the index
		t.Fatalf("only %d keys under %s: %q", acmeKeys, acmeKeyPrefix, keys)
	}
	// Not even a piece of one: the base64 of each private key in the storage,
	// looked for in every edge's log, certmagic's Debug lines included.
	var secrets []string
	for _, k := range keys {
		v, _ := rc.HGet(context.Background(), k, "v").Bytes() // a blob's bytes (redisstore.Blobs)
		for rest := v; ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if strings.Contains(b.Type, "PRIVATE KEY") {
				enc := base64.StdEncoding.EncodeToString(b.Bytes)
				secrets = append(secrets, enc[len(enc)/2:len(enc)/2+24])
			}
		}
	}
	if len(secrets) < 2 { // the ACME account's key and the certificate's
		t.Fatalf("%d private keys found in the storage, want at least 2", len(secrets))
	}
	for i, e := range edges {
		log := e.log.String()
		if !strings.Contains(log, "level=DEBUG") {
			t.Fatalf("edge %d's log has no Debug line: the check below would see nothing of certmagic's", i)
		}
		if strings.Contains(log, "PRIVATE KEY") {
			t.Fatalf("edge %d logged a private key", i)
		}
		for _, s := range secrets {
			if strings.Contains(log, s) {
				t.Fatalf("edge %d logged a piece of a private key (%s…)", i, s[:8])
			}
		}
	}
}

// TestACMERedisDownAtStart: an edge whose shared storage (storage: redis) cannot be
// read at start serves on, says degraded, and reads storage again with backoff: once
// Redis is back it obtains its certificate.
func TestACMERedisDownAtStart(t *testing.T) {
	r := testkit.StartRedis(t)
	r.Kill()
	ca := newPebble(t)
	e := newACMEEdge(t, ca, func(c *config.Config) {
		c.Redis = &config.RedisConfig{URL: r.URL()}
		c.TLS.ACME.Storage = config.StorageRedis
		c.TLS.ACME.Challenges = []string{"tls-alpn-01"}
	}, Options{})
	ca.Start(pebbleOptions{TLSPort: e.port})
	e.serve()
	if !strings.Contains(e.log.String(), "cannot read the certificate's storage; retrying in the background") {
		t.Fatalf("no word of the unreadable storage:\n%s", e.log.String())
	}
	var rd admin.Readiness
	if adminGet(t, e.Server, "/readyz", &rd); rd.Status != "degraded" {
		t.Fatalf("/readyz = %+v, want degraded", rd)
	}
	r.Start()
	restarted := time.Now()
	leaf := e.waitACME(t, acmeDomain, 30*time.Second)
	t.Logf("obtained %v after Redis came back (storage is read again every 5 s at first)", time.Since(restarted))
	if got := handshakeEach(t, e.port, ca.Root(), acmeDomain); got != leaf.SerialNumber.Text(16) {
		t.Fatalf("served %s, obtained %s", got, leaf.SerialNumber.Text(16))
	}
}
