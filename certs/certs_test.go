package certs

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var quiet = slog.New(slog.DiscardHandler)

// testPair is a self-signed certificate for names, as PEM.
type testPair struct {
	cert, key []byte
	leaf      *x509.Certificate
}

func newTestPair(t testing.TB, names ...string) testPair {
	t.Helper()
	c, err := SelfSigned(names...)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return testPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		leaf: c.Leaf,
	}
}

// write puts the pair in dir as name.pem and name.key.
func (p testPair) write(t testing.TB, dir, name string) Pair {
	t.Helper()
	pr := Pair{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+".key")}
	writeFile(t, pr.Cert, p.cert)
	writeFile(t, pr.Key, p.key)
	return pr
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func pinOf(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// handshake does a real TLS handshake over loopback with s's ServerConfig and returns
// the certificate the server presented. serverName "" sends no SNI.
func handshake(t *testing.T, s *Store, serverName string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		srvErr <- tls.Server(c, s.ServerConfig("h2", "http/1.1")).Handshake()
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	conn := tls.Client(raw, &tls.Config{
		ServerName:         serverName,
		RootCAs:            roots,
		InsecureSkipVerify: roots == nil, // SNI tests look at the certificate, not its trust
		NextProtos:         []string{"h2"},
	})
	defer conn.Close()
	if err := conn.Handshake(); err != nil {
		t.Fatalf("client handshake with ServerName %q: %v", serverName, err)
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	st := conn.ConnectionState()
	if st.NegotiatedProtocol != "h2" {
		t.Errorf("ALPN = %q, want h2", st.NegotiatedProtocol)
	}
	return st.PeerCertificates[0]
}

func TestSNI(t *testing.T) {
	dir := t.TempDir()
	a := newTestPair(t, "a.test")
	b := newTestPair(t, "b.test", "*.w.test")
	s, err := New(Config{Pairs: []Pair{a.write(t, dir, "a"), b.write(t, dir, "b")}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if s.Development() {
		t.Error("Development() = true with configured pairs")
	}
	tests := []struct {
		name       string
		serverName string
		want       testPair
	}{
		{name: "first pair", serverName: "a.test", want: a},
		{name: "second pair", serverName: "b.test", want: b},
		{name: "upper case", serverName: "B.Test", want: b},
		{name: "wildcard", serverName: "x.w.test", want: b},
		{name: "wildcard is one label deep", serverName: "y.x.w.test", want: a},
		{name: "wildcard needs a label", serverName: "w.test", want: a},
		{name: "unknown name gets the default", serverName: "c.test", want: a},
		{name: "no SNI gets the default", serverName: "", want: a},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := handshake(t, s, tt.serverName, nil)
			if !got.Equal(tt.want.leaf) {
				t.Errorf("got certificate for %v, want %v", got.DNSNames, tt.want.leaf.DNSNames)
			}
		})
	}
}

func TestGetCertificateMatch(t *testing.T) {
	dir := t.TempDir()
	a := newTestPair(t, "a.test")
	b := newTestPair(t, "b.test", "*.w.test", "Mixed.Test")
	c := newTestPair(t, "z.w.test", "b.test") // b.test is taken by the earlier pair
	s, err := New(Config{Pairs: []Pair{a.write(t, dir, "a"), b.write(t, dir, "b"), c.write(t, dir, "c")}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		serverName string
		want       testPair
	}{
		{serverName: "a.test", want: a},
		{serverName: "A.TEST", want: a},
		{serverName: "b.test.", want: b}, // trailing dot
		{serverName: "mixed.test", want: b},
		{serverName: "z.w.test", want: c}, // exact beats wildcard, whatever the order
		{serverName: "q.w.test", want: b},
		{serverName: "Q.W.TEST", want: b},
		{serverName: ".w.test", want: a}, // empty label
		{serverName: "w.test", want: a},
		{serverName: "*.w.test", want: b}, // a literal "*" is one label like any other
		{serverName: strings.Repeat("x", 300) + ".test", want: a},
		{serverName: "", want: a},
	}
	for _, tt := range tests {
		t.Run(tt.serverName, func(t *testing.T) {
			got, err := s.GetCertificate(&tls.ClientHelloInfo{ServerName: tt.serverName})
			if err != nil {
				t.Fatal(err)
			}
			if !got.Leaf.Equal(tt.want.leaf) {
				t.Errorf("got certificate for %v, want %v", got.Leaf.DNSNames, tt.want.leaf.DNSNames)
			}
		})
	}
}

func TestReload(t *testing.T) {
	other := newTestPair(t, "a.test")
	tests := []struct {
		name     string
		breakIt  func(t *testing.T, p Pair)
		wantFile func(p Pair) string
		wantErr  error
		wantText string
	}{
		{
			name:     "garbage certificate",
			breakIt:  func(t *testing.T, p Pair) { writeFile(t, p.Cert, []byte("not a certificate\n")) },
			wantFile: func(p Pair) string { return p.Cert },
			wantErr:  ErrNoCertificate,
			wantText: "no CERTIFICATE block found (is this a PEM certificate?)",
		},
		{
			name: "truncated certificate",
			breakIt: func(t *testing.T, p Pair) {
				b, _ := pem.Decode(other.cert)
				b.Bytes = b.Bytes[:len(b.Bytes)/2]
				writeFile(t, p.Cert, pem.EncodeToMemory(b))
			},
			wantFile: func(p Pair) string { return p.Cert },
			wantErr:  ErrBadCertificate,
			wantText: "certificate does not parse: block 1:",
		},
		{
			name:     "missing certificate",
			breakIt:  func(t *testing.T, p Pair) { os.Remove(p.Cert) },
			wantFile: func(p Pair) string { return p.Cert },
			wantErr:  fs.ErrNotExist,
			wantText: "cannot read certificate: ",
		},
		{
			name:     "key of another certificate",
			breakIt:  func(t *testing.T, p Pair) { writeFile(t, p.Key, other.key) },
			wantFile: func(p Pair) string { return p.Key },
			wantErr:  ErrKeyMismatch,
			wantText: "private key does not match the certificate (is it the key for ",
		},
		{
			name: "cert and key swapped",
			breakIt: func(t *testing.T, p Pair) {
				writeFile(t, p.Cert, other.key)
				writeFile(t, p.Key, other.cert)
			},
			wantFile: func(p Pair) string { return p.Cert },
			wantErr:  ErrNoCertificate,
			wantText: "are cert and key swapped?",
		},
		{
			name: "garbage key",
			breakIt: func(t *testing.T, p Pair) {
				writeFile(t, p.Key, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
			},
			wantFile: func(p Pair) string { return p.Key },
			wantErr:  ErrBadKey,
			wantText: "private key does not parse:",
		},
		{
			name: "encrypted key",
			breakIt: func(t *testing.T, p Pair) {
				writeFile(t, p.Key, []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"))
			},
			wantFile: func(p Pair) string { return p.Key },
			wantErr:  ErrEncryptedKey,
			wantText: "private key is encrypted (decrypt it",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			old := newTestPair(t, "a.test")
			pair := old.write(t, dir, "site")
			var logs bytes.Buffer
			s, err := New(Config{Pairs: []Pair{pair}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			oldPin := s.Pin()

			tt.breakIt(t, pair)
			err = s.Reload()
			if err == nil {
				t.Fatal("Reload of a broken pair succeeded")
			}
			var fe *FileError
			if !errors.As(err, &fe) || fe.Path != tt.wantFile(pair) {
				t.Errorf("Reload error %v does not name %s", err, tt.wantFile(pair))
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Reload error %v is not %v", err, tt.wantErr)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "certs: "+tt.wantFile(pair)+": ") || !strings.Contains(msg, tt.wantText) || strings.Contains(msg, "\n") {
				t.Errorf("Reload error %q: want one line \"certs: %s: …%s…\"", msg, tt.wantFile(pair), tt.wantText)
			}
			if !strings.Contains(logs.String(), "certificate reload failed") || !strings.Contains(logs.String(), "component=certs") {
				t.Errorf("failure not logged:\n%s", logs.String())
			}
			if s.Pin() != oldPin {
				t.Error("Pin changed after a failed reload")
			}
			if got := handshake(t, s, "a.test", nil); !got.Equal(old.leaf) {
				t.Error("a failed reload changed the certificate served")
			}

			fresh := newTestPair(t, "a.test")
			fresh.write(t, dir, "site")
			if err := s.Reload(); err != nil {
				t.Fatalf("Reload of a repaired pair: %v", err)
			}
			if s.Pin() == oldPin || s.Pin() != pinOf(fresh.leaf) {
				t.Error("Pin did not change to the new certificate's")
			}
			if got := handshake(t, s, "a.test", nil); !got.Equal(fresh.leaf) {
				t.Error("reload did not swap the certificate served")
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	good := newTestPair(t, "a.test").write(t, dir, "good")
	tests := []struct {
		name     string
		pairs    []Pair
		wantErr  error
		wantText string
	}{
		{name: "empty cert path", pairs: []Pair{{Key: good.Key}}, wantErr: ErrEmptyPath, wantText: "certs: pair 0: empty path: cert"},
		{name: "empty key path", pairs: []Pair{good, {Cert: good.Cert}}, wantErr: ErrEmptyPath, wantText: "certs: pair 1 (" + good.Cert + "): empty path: key"},
		{name: "missing key", pairs: []Pair{{Cert: good.Cert, Key: good.Key + ".nope"}}, wantErr: fs.ErrNotExist, wantText: "certs: " + good.Key + ".nope: cannot read private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Pairs: tt.pairs, Logger: quiet})
			if s != nil || !errors.Is(err, tt.wantErr) || !strings.HasPrefix(err.Error(), tt.wantText) {
				t.Errorf("New = %v, %v; want error %q… (%v)", s, err, tt.wantText, tt.wantErr)
			}
		})
	}
}

func TestPin(t *testing.T) {
	dir := t.TempDir()
	a := newTestPair(t, "a.test")
	pairs, err := New(Config{Pairs: []Pair{a.write(t, dir, "a"), newTestPair(t, "b.test").write(t, dir, "b")}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := New(Config{CacheDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	devCert, err := dev.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    *Store
		leaf *x509.Certificate
	}{
		{name: "default of configured pairs", s: pairs, leaf: a.leaf},
		{name: "development", s: dev, leaf: devCert.Leaf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spki, err := x509.MarshalPKIXPublicKey(tt.leaf.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(spki)
			want := base64.StdEncoding.EncodeToString(sum[:])
			if got := tt.s.Pin(); got != want || got != pinOf(tt.leaf) {
				t.Errorf("Pin() = %s, want %s", got, want)
			}
		})
	}
}

func TestServerConfig(t *testing.T) {
	s, err := New(Config{CacheDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	protos := []string{"h2", "http/1.1"}
	tcp := s.ServerConfig(protos...)
	quic := s.ServerConfig()
	if tcp == quic {
		t.Fatal("ServerConfig returned the same *tls.Config twice")
	}
	protos[0] = "changed"
	if !slices.Equal(tcp.NextProtos, []string{"h2", "http/1.1"}) || len(quic.NextProtos) != 0 {
		t.Errorf("NextProtos = %q and %q, want [h2 http/1.1] and []", tcp.NextProtos, quic.NextProtos)
	}
	quic.NextProtos = []string{"h3"} // as quic-go does
	if tcp.NextProtos[0] != "h2" {
		t.Error("configs share NextProtos")
	}
	for _, c := range []*tls.Config{tcp, quic} {
		if c.MinVersion != tls.VersionTLS12 || c.GetCertificate == nil || len(c.Certificates) != 0 {
			t.Errorf("config: MinVersion %x, GetCertificate set %v, %d static certificates", c.MinVersion, c.GetCertificate != nil, len(c.Certificates))
		}
	}
}

func TestDefaultCacheDir(t *testing.T) {
	tests := []struct {
		name, xdg, home, want string
	}{
		{name: "XDG_CACHE_HOME", xdg: "/xdg", home: "/home/u", want: "/xdg/h3edge"},
		{name: "unset", xdg: "", home: "/home/u", want: "/home/u/.cache/h3edge"},
		{name: "relative XDG_CACHE_HOME is ignored", xdg: "rel", home: "/home/u", want: "/home/u/.cache/h3edge"},
		{name: "nothing", xdg: "", home: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("XDG_CACHE_HOME", tt.xdg)
			t.Setenv("HOME", tt.home)
			if got := DefaultCacheDir(); got != filepath.FromSlash(tt.want) {
				t.Errorf("DefaultCacheDir() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNewWithoutCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	if _, err := New(Config{Logger: quiet}); !errors.Is(err, ErrNoCacheDir) {
		t.Errorf("New without HOME = %v, want %v", err, ErrNoCacheDir)
	}
}

// TestConcurrentReload is for the race detector: handshakes read while reloads swap.
func TestConcurrentReload(t *testing.T) {
	dir := t.TempDir()
	p := newTestPair(t, "a.test").write(t, dir, "a")
	s, err := New(Config{Pairs: []Pair{p}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 100 {
				if c, err := s.GetCertificate(&tls.ClientHelloInfo{ServerName: "a.test"}); c == nil || err != nil {
					t.Error("GetCertificate failed during reload")
					return
				}
				_ = s.Pin()
			}
		})
		wg.Go(func() {
			for range 10 {
				if err := s.Reload(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// FuzzMatch checks the allocation-free matcher against a plain strings version.
func FuzzMatch(f *testing.F) {
	for _, s := range []string{"a.test", "A.TEST.", "x.w.test", "y.x.w.test", ".w.test", "w.test", "", ".", "..", "*.w.test"} {
		f.Add(s)
	}
	dir := f.TempDir()
	a := newTestPair(f, "a.test")
	b := newTestPair(f, "b.test", "*.w.test")
	s, err := New(Config{Pairs: []Pair{a.write(f, dir, "a"), b.write(f, dir, "b")}, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	snap := s.cur.Load()
	f.Fuzz(func(t *testing.T, name string) {
		want := func() *tls.Certificate {
			if len(name) > maxName+1 {
				return nil
			}
			lower := []byte(name) // DNS names compare case-insensitively in ASCII only
			for i, c := range lower {
				if 'A' <= c && c <= 'Z' {
					lower[i] = c - 'A' + 'a'
				}
			}
			n := strings.TrimSuffix(string(lower), ".")
			if c, ok := snap.exact[n]; ok {
				return c
			}
			if label, rest, ok := strings.Cut(n, "."); ok && label != "" {
				return snap.wildcard[rest]
			}
			return nil
		}()
		if got := snap.match(name); got != want {
			t.Errorf("match(%q) = %p, want %p", name, got, want)
		}
	})
}

func BenchmarkGetCertificate(b *testing.B) {
	dir := b.TempDir()
	pairs := []Pair{newTestPair(b, "a.test").write(b, dir, "a"), newTestPair(b, "b.test", "*.w.test").write(b, dir, "b")}
	s, err := New(Config{Pairs: pairs, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"b.test", "Mixed.Case.W.Test", "x.w.test", "unknown.test", ""} {
		b.Run("sni="+name, func(b *testing.B) {
			hello := &tls.ClientHelloInfo{ServerName: name}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if c, _ := s.GetCertificate(hello); c == nil {
						b.Error("no certificate")
					}
				}
			})
		})
	}
}
