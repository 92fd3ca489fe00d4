package edge

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter"
)

// keySource is one entry of a policy's `key:` chain.
type keySource struct {
	kind string // "header", "bearer", "query", "ip"
	name string // header name (canonical) or query parameter
}

func parseKeySource(s string) keySource {
	kind, name, _ := strings.Cut(s, ":")
	if kind == "header" {
		name = http.CanonicalHeaderKey(name)
	}
	return keySource{kind: kind, name: name}
}

// errBadKey is a client key over config.MaxKeyLen bytes or with control characters.
var errBadKey = errors.New("the client key is longer than 256 bytes or contains control characters")

// value returns what the source yields for r, if anything.
func (k keySource) value(r *http.Request) (string, bool) {
	switch k.kind {
	case "header":
		v := r.Header[k.name]
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		return v[0], true
	case "bearer":
		v := r.Header["Authorization"]
		if len(v) == 0 || len(v[0]) < 7 || !strings.EqualFold(v[0][:7], "bearer ") {
			return "", false
		}
		tok := strings.TrimSpace(v[0][7:])
		return tok, tok != ""
	case "query":
		if r.URL.RawQuery == "" {
			return "", false
		}
		v := r.URL.Query().Get(k.name)
		return v, v != ""
	}
	return "", false
}

// hasher turns client keys into limiter Keys: a keyed SHA-256 truncated to 16 bytes, so
// the raw key never leaves the request — not into memory tables, Redis, logs or metrics.
// The key kind is hashed along, so an API key equal to some address string is not the
// same client.
type hasher struct{ secret []byte }

func (h hasher) key(kind byte, value string) limiter.Key {
	var buf [64 + config.MaxKeyLen + 2]byte
	b := append(buf[:0], h.secret...)
	b = append(b, kind, 0)
	b = append(b, value...)
	sum := sha256.Sum256(b)
	var k limiter.Key
	copy(k[:], sum[:])
	return k
}

// ipKey hashes an address prefix.
func (h hasher) ipKey(p netip.Prefix) limiter.Key {
	a := p.Addr().As16()
	var buf [64 + 18]byte
	b := append(buf[:0], h.secret...)
	b = append(b, 'i', byte(p.Bits()))
	b = append(b, a[:]...)
	sum := sha256.Sum256(b)
	var k limiter.Key
	copy(k[:], sum[:])
	return k
}

// keySecret returns the configured key-hash secret, or one generated once and cached in
// dir/key-secret. Every edge of a fleet sharing Redis must use the same secret (set
// keys.secret), or their keys for one client differ.
func keySecret(configured, dir string) ([]byte, error) {
	if configured != "" {
		s := sha256.Sum256([]byte(configured))
		return s[:], nil
	}
	file := filepath.Join(dir, "key-secret")
	if b, err := os.ReadFile(file); err == nil {
		if s, err := hex.DecodeString(string(bytes.TrimSpace(b))); err == nil && len(s) == 32 {
			return s, nil
		}
	}
	s := make([]byte, 32)
	rand.Read(s)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("edge: key secret: %w (set keys.secret)", err)
	}
	tmp, err := os.CreateTemp(dir, "key-secret-*")
	if err != nil {
		return nil, fmt.Errorf("edge: key secret: %w (set keys.secret)", err)
	}
	tmp.WriteString(hex.EncodeToString(s) + "\n")
	tmp.Close()
	// Two edges starting together: whoever links first wins; the other reads it.
	if err := os.Link(tmp.Name(), file); err != nil {
		os.Remove(tmp.Name())
		if b, rerr := os.ReadFile(file); rerr == nil {
			if s2, derr := hex.DecodeString(string(bytes.TrimSpace(b))); derr == nil && len(s2) == 32 {
				return s2, nil
			}
		}
		return nil, fmt.Errorf("edge: key secret: %w (set keys.secret)", err)
	}
	os.Remove(tmp.Name())
	return s, nil
}
