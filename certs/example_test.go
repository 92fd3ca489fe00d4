package certs_test

import (
	"fmt"
	"log"
	"log/slog"
	"os"

	"crypto/x509"

	"github.com/h3edge/h3edge/certs"
)

func ExampleDefaultCacheDir() {
	old, set := os.LookupEnv("XDG_CACHE_HOME")
	os.Setenv("XDG_CACHE_HOME", "/var/cache")
	defer func() {
		if set {
			os.Setenv("XDG_CACHE_HOME", old)
		} else {
			os.Unsetenv("XDG_CACHE_HOME")
		}
	}()

	fmt.Println(certs.DefaultCacheDir())
	// Output: /var/cache/h3edge
}

func ExampleNew() {
	dir, err := os.MkdirTemp("", "h3edge-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// No pairs: a development certificate, generated once and cached in dir.
	s, err := certs.New(certs.Config{CacheDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	again, err := certs.New(certs.Config{CacheDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("development:", s.Development())
	fmt.Println("pin length:", len(s.Pin()))
	fmt.Println("same pin on the next start:", again.Pin() == s.Pin())
	// Output:
	// development: true
	// pin length: 44
	// same pin on the next start: true
}

func ExampleStore_ServerConfig() {
	dir, err := os.MkdirTemp("", "h3edge-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := certs.New(certs.Config{CacheDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}

	tcp := s.ServerConfig("h2", "http/1.1") // for the TCP listener
	quic := s.ServerConfig()                // for QUIC: http3 sets "h3" on its own copy
	fmt.Println(tcp.NextProtos, quic.NextProtos, tcp != quic)
	// Output: [h2 http/1.1] [] true
}

// A self-signed certificate for a test server: its own root, so a client can trust it.
func ExampleSelfSigned() {
	c, err := certs.SelfSigned("api.test", "127.0.0.1")
	if err != nil {
		fmt.Println(err)
		return
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.Leaf)
	_, err = c.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: roots})
	fmt.Println(c.Leaf.DNSNames, c.Leaf.IPAddresses, err)
	// Output:
	// [api.test] [127.0.0.1] <nil>
}
