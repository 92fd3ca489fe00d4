// Package identity answers who is asking: the client address a request comes from
// (believing forwarded fields from trusted proxies only), the client key a policy's
// key chain yields, the keyed hash that stands for that key everywhere past the
// request, the per-connection memo of those hashes, and the plans API keys map to.
package identity

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter"
)

// Hasher turns client keys into limiter Keys: a keyed SHA-256 truncated to 16 bytes, so
// the raw key never leaves the request — not into memory tables, Redis, logs or metrics.
// The key kind is hashed along, so an API key equal to some address string is not the
// same client. The zero Hasher hashes without a secret. It is safe for concurrent use.
type Hasher struct{ secret []byte }

// NewHasher returns a Hasher keyed with secret (KeySecret).
func NewHasher(secret []byte) Hasher { return Hasher{secret: secret} }

// Credential hashes an API key or token.
func (h Hasher) Credential(v string) limiter.Key { return h.key('k', v) }

// Anonymous is the key of every request whose key chain, without ip, yields nothing:
// one anonymous client per policy, keyed apart from any real key.
func (h Hasher) Anonymous() limiter.Key { return h.key('a', "") }

func (h Hasher) key(kind byte, value string) limiter.Key {
	var buf [64 + config.MaxKeyLen + 2]byte
	b := append(buf[:0], h.secret...)
	b = append(b, kind, 0)
	b = append(b, value...)
	sum := sha256.Sum256(b)
	var k limiter.Key
	copy(k[:], sum[:])
	return k
}

// Prefix hashes a source address prefix (SourcePrefix).
func (h Hasher) Prefix(p netip.Prefix) limiter.Key {
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

// KeySecret returns the configured key-hash secret, or one generated once and cached in
// dir/key-secret. Every edge of a fleet sharing Redis must use the same secret (set
// keys.secret), or their keys for one client differ.
func KeySecret(configured, dir string) ([]byte, error) {
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
		return nil, fmt.Errorf("identity: key secret: %w (set keys.secret)", err)
	}
	tmp, err := os.CreateTemp(dir, "key-secret-*")
	if err != nil {
		return nil, fmt.Errorf("identity: key secret: %w (set keys.secret)", err)
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
		return nil, fmt.Errorf("identity: key secret: %w (set keys.secret)", err)
	}
	os.Remove(tmp.Name())
	return s, nil
}
