package certs

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func devLeaf(t *testing.T, dir string) *x509.Certificate {
	t.Helper()
	c, err := loadPair(Pair{Cert: filepath.Join(dir, devCertFile), Key: filepath.Join(dir, devKeyFile)})
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

func modTime(t *testing.T, path string) time.Time {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

func TestDevelopmentCertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache", "h3edge")
	s, err := New(Config{CacheDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Development() {
		t.Error("Development() = false without pairs")
	}
	for path, want := range map[string]os.FileMode{
		dir:                             0o700 | os.ModeDir,
		filepath.Join(dir, devKeyFile):  0o600,
		filepath.Join(dir, devCertFile): 0o644,
	} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", path, fi.Mode(), err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, devLockFile)); !os.IsNotExist(err) {
		t.Errorf("lock file left behind: %v", err)
	}

	leaf := devLeaf(t, dir)
	if leaf.PublicKeyAlgorithm != x509.ECDSA || s.Pin() != pinOf(leaf) {
		t.Errorf("cached certificate: %v key, pin %s; want ECDSA, pin %s", leaf.PublicKeyAlgorithm, pinOf(leaf), s.Pin())
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life < 364*24*time.Hour || life > 367*24*time.Hour {
		t.Errorf("valid for %v, want about a year", life)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		t.Run(name, func(t *testing.T) {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
				t.Errorf("Verify(%s): %v", name, err)
			}
		})
	}
	t.Run("handshake", func(t *testing.T) {
		if got := handshake(t, s, "localhost", roots); !got.Equal(leaf) {
			t.Error("handshake did not present the cached certificate")
		}
	})

	certTime, keyTime := modTime(t, filepath.Join(dir, devCertFile)), modTime(t, filepath.Join(dir, devKeyFile))
	again, err := New(Config{CacheDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if again.Pin() != s.Pin() || !again.Development() {
		t.Errorf("second New: pin %s, want %s", again.Pin(), s.Pin())
	}
	if !modTime(t, filepath.Join(dir, devCertFile)).Equal(certTime) || !modTime(t, filepath.Join(dir, devKeyFile)).Equal(keyTime) {
		t.Error("second New rewrote the cached files")
	}
	if err := again.Reload(); err != nil || again.Pin() != s.Pin() {
		t.Errorf("Reload of a fresh development certificate: %v, pin %s, want %s", err, again.Pin(), s.Pin())
	}
}

func TestDevelopmentRegeneration(t *testing.T) {
	t0 := time.Now()
	day := 24 * time.Hour
	tests := []struct {
		name    string
		later   time.Duration // time of the second start
		breakIt func(t *testing.T, dir string)
		reuse   bool
	}{
		{name: "fresh", later: 300 * day, reuse: true},
		{name: "within 7 days of expiry", later: 359 * day},
		{name: "expired", later: 400 * day},
		{name: "clock went back", later: -2 * time.Hour},
		{name: "unreadable certificate", breakIt: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, devCertFile), []byte("garbage"))
		}},
		{name: "missing key", breakIt: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, devKeyFile))
		}},
		{name: "key of another certificate", breakIt: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, devKeyFile), newTestPair(t, "localhost").key)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			first, err := newStore(Config{CacheDir: dir, Logger: quiet}, func() time.Time { return t0 })
			if err != nil {
				t.Fatal(err)
			}
			if tt.breakIt != nil {
				tt.breakIt(t, dir)
			}
			clock := func() time.Time { return t0.Add(tt.later) }
			second, err := newStore(Config{CacheDir: dir, Logger: quiet}, clock)
			if err != nil {
				t.Fatal(err)
			}
			if reused := second.Pin() == first.Pin(); reused != tt.reuse {
				t.Fatalf("certificate reused = %v, want %v", reused, tt.reuse)
			}
			if !tt.reuse {
				if leaf := devLeaf(t, dir); pinOf(leaf) != second.Pin() || !leaf.NotAfter.After(clock().Add(300*day)) {
					t.Errorf("new certificate not cached (pin %s, not after %v)", pinOf(leaf), leaf.NotAfter)
				}
			}
		})
	}
}

func TestDevelopmentConcurrentStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "h3edge")
	pins := make([]string, 8)
	var wg sync.WaitGroup
	for i := range pins {
		wg.Go(func() {
			s, err := New(Config{CacheDir: dir, Logger: quiet})
			if err != nil {
				t.Error(err)
				return
			}
			pins[i] = s.Pin()
		})
	}
	wg.Wait()
	for i, p := range pins {
		if p != pinOf(devLeaf(t, dir)) {
			t.Errorf("start %d: pin %s, want the cached %s", i, p, pinOf(devLeaf(t, dir)))
		}
	}
}

func TestDevelopmentStaleLock(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, devLockFile)
	writeFile(t, lock, nil)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{CacheDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pin() != pinOf(devLeaf(t, dir)) {
		t.Error("certificate not cached after breaking a stale lock")
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("lock file left behind: %v", err)
	}
}

// TestDevelopmentUncached: a cache directory that cannot be created still gives a
// working (uncached) development certificate.
func TestDevelopmentUncached(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, file, nil)
	s, err := New(Config{CacheDir: filepath.Join(file, "h3edge"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.GetCertificate(&tls.ClientHelloInfo{ServerName: "localhost"})
	if err != nil || !s.Development() || c.Leaf.VerifyHostname("localhost") != nil {
		t.Errorf("uncached development certificate: %v, Development %v", err, s.Development())
	}
}
