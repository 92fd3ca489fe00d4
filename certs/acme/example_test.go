package acme_test

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/h3edge/h3edge/certs/acme"
)

// A Manager for one name, kept in a directory. Until Start has obtained its
// certificate the name is missing, and GetCertificate leaves the handshake to the
// caller's fallback.
func Example() {
	dir, _ := os.MkdirTemp("", "acme-example-")
	defer os.RemoveAll(dir)
	m, err := acme.New(acme.Config{
		Domains:    []string{"api.example.com"},
		Email:      "ops@example.com",
		CA:         "https://acme-v02.api.letsencrypt.org/directory",
		Challenges: []string{acme.TLSALPN01},
		Dir:        dir,
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	// The edge would now call m.Start(acme.Listeners{TLSPort: 443}) once its TLS
	// listener is bound, offering acme.ALPN beside h2 and http/1.1.
	fmt.Println("missing:", m.Missing())
	// Output:
	// missing: [api.example.com]
}
