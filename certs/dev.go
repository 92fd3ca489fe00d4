package certs

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The development certificate's cache: two files in the cache directory, written under
// a lock file so that processes starting together generate one certificate, not one
// each, and never pair one process's key with another's certificate.
const (
	devCertFile = "cert.pem"
	devKeyFile  = "key.pem"
	devLockFile = "lock"

	devLifetime    = 365 * 24 * time.Hour
	devRenewBefore = 7 * 24 * time.Hour // regenerate this close to expiry

	lockPoll   = 20 * time.Millisecond
	lockStale  = 10 * time.Second // a lock this old was left by a crashed process
	lockGiveUp = 2 * lockStale    // then serve an uncached certificate rather than hang
)

// loadDev returns the cached development certificate, generating and caching a new one
// when the cache is missing, broken or close to expiry. If the cache cannot be written
// it serves an uncached certificate (whose pin changes on every start) and says so.
func (s *Store) loadDev() (*tls.Certificate, error) {
	certPath, keyPath := filepath.Join(s.dir, devCertFile), filepath.Join(s.dir, devKeyFile)
	giveUp := time.Now().Add(lockGiveUp)
	for {
		c, why := s.cachedDev(certPath, keyPath)
		if c != nil {
			return c, nil
		}
		err := s.lockDev()
		if err == nil {
			c, err := s.createDev(certPath, keyPath, why)
			os.Remove(filepath.Join(s.dir, devLockFile))
			return c, err
		}
		if !errors.Is(err, fs.ErrExist) || time.Now().After(giveUp) {
			s.log.Warn("cannot cache the development certificate; its pin will change on every start",
				"dir", s.dir, "error", err)
			return s.generateDev()
		}
		s.waitLock()
	}
}

// cachedDev returns the cached certificate if it is usable now, else nil and why not.
func (s *Store) cachedDev(certPath, keyPath string) (*tls.Certificate, string) {
	c, err := loadPair(Pair{Cert: certPath, Key: keyPath})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, "none cached"
	case err != nil:
		return nil, err.Error()
	}
	now := s.now()
	switch {
	case now.Before(c.Leaf.NotBefore):
		return nil, "cached certificate not valid before " + c.Leaf.NotBefore.Format(time.RFC3339)
	case now.After(c.Leaf.NotAfter.Add(-devRenewBefore)):
		return nil, "cached certificate expires " + c.Leaf.NotAfter.Format(time.RFC3339)
	}
	return c, ""
}

// createDev runs with the lock held.
func (s *Store) createDev(certPath, keyPath, why string) (*tls.Certificate, error) {
	// Another process may have filled the cache while this one waited for the lock.
	if c, _ := s.cachedDev(certPath, keyPath); c != nil {
		return c, nil
	}
	s.log.Info("generating a development certificate", "dir", s.dir, "reason", why)
	c, err := s.generateDev()
	if err != nil {
		return nil, err
	}
	if err := writeDev(certPath, keyPath, c); err != nil {
		s.log.Warn("cannot cache the development certificate; its pin will change on every start",
			"dir", s.dir, "error", err)
	}
	return c, nil
}

// lockDev creates the lock file; an fs.ErrExist error means another process holds it.
func (s *Store) lockDev() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(s.dir, devLockFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// waitLock waits a little for the lock's holder, and removes a lock left by a crash.
func (s *Store) waitLock() {
	path := filepath.Join(s.dir, devLockFile)
	fi, err := os.Stat(path)
	switch {
	case err != nil: // released meanwhile
	case time.Since(fi.ModTime()) > lockStale:
		s.log.Warn("removing a stale development certificate lock", "file", path)
		os.Remove(path)
	default:
		time.Sleep(lockPoll)
	}
}

// generateDev makes a self-signed ECDSA P-256 certificate for localhost, 127.0.0.1 and
// ::1, valid for a year.
func (s *Store) generateDev() (*tls.Certificate, error) {
	c, err := newSelfSigned(selfSignedSpec{
		subject:   pkix.Name{Organization: []string{"h3edge"}, CommonName: "h3edge development certificate"},
		names:     loopbackNames,
		notBefore: s.now().Add(-time.Hour), // tolerate a little clock skew
		lifetime:  devLifetime,
	})
	if err != nil {
		return nil, fmt.Errorf("certs: development certificate: %w", err)
	}
	return c, nil
}

// writeDev writes the key, then the certificate, each atomically.
func writeDev(certPath, keyPath string, c *tls.Certificate) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return err
	}
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644)
}

// writeAtomic writes a temporary file beside path and renames it over path, so a
// reader sees the old file or the new one, never half of one.
func writeAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp") // mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
