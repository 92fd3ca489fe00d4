package certs

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Problems with a PEM file. Like fs.ErrNotExist inside an fs.PathError they are always
// returned wrapped in a *FileError, which puts "certs: FILE: " in front; test for them
// with errors.Is.
var (
	ErrNoCertificate  = errors.New("no CERTIFICATE block found")
	ErrBadCertificate = errors.New("certificate does not parse")
	ErrNoKey          = errors.New("no PRIVATE KEY block found")
	ErrBadKey         = errors.New("private key does not parse")
	ErrEncryptedKey   = errors.New("private key is encrypted")
	ErrKeyMismatch    = errors.New("private key does not match the certificate")
)

// Configuration problems, returned as "certs: …: " + the sentinel + a hint.
var (
	ErrEmptyPath  = errors.New("empty path")
	ErrNoCacheDir = errors.New("no cache directory for the development certificate")
)

// FileError is a problem with one PEM file. Its message is one line:
// "certs: FILE: problem (what to do)".
type FileError struct {
	Path string // the file as configured
	Err  error  // one of the sentinels above, possibly wrapping a cause, or an I/O error
	Hint string // what to do about it; may be empty
}

func (e *FileError) Error() string {
	msg := "certs: " + e.Path + ": " + e.Err.Error()
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

func (e *FileError) Unwrap() error { return e.Err }

// loadPair reads and checks one pair.
func loadPair(p Pair) (*tls.Certificate, error) {
	chain, leaf, err := readChain(p.Cert)
	if err != nil {
		return nil, err
	}
	key, err := readKey(p.Key)
	if err != nil {
		return nil, err
	}
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, &FileError{Path: p.Key, Err: ErrKeyMismatch, Hint: "is it the key for " + p.Cert + "?"}
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

func readFile(path, what string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// The path is already in FileError: keep only the cause.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &FileError{Path: path, Err: fmt.Errorf("cannot read %s: %w", what, err), Hint: "check the path and its permissions"}
	}
	return data, nil
}

// readChain returns the DER chain, leaf first, and the parsed leaf.
func readChain(path string) ([][]byte, *x509.Certificate, error) {
	data, err := readFile(path, "certificate")
	if err != nil {
		return nil, nil, err
	}
	var chain [][]byte
	var leaf *x509.Certificate
	sawKey := false
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if strings.HasSuffix(b.Type, "PRIVATE KEY") {
			sawKey = true
			continue
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, &FileError{Path: path, Err: fmt.Errorf("%w: block %d: %w", ErrBadCertificate, len(chain)+1, err), Hint: "is the file complete? re-export it"}
		}
		if leaf == nil {
			leaf = c
		}
		chain = append(chain, b.Bytes)
	}
	if leaf == nil {
		hint := "is this a PEM certificate?"
		if sawKey {
			hint = "it holds a private key: are cert and key swapped?"
		}
		return nil, nil, &FileError{Path: path, Err: ErrNoCertificate, Hint: hint}
	}
	return chain, leaf, nil
}

func readKey(path string) (crypto.Signer, error) {
	data, err := readFile(path, "private key")
	if err != nil {
		return nil, err
	}
	var block *pem.Block
	sawCert := false
	for rest := data; block == nil; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		switch {
		case strings.HasSuffix(b.Type, "PRIVATE KEY"):
			block = b
		case b.Type == "CERTIFICATE":
			sawCert = true
		}
	}
	if block == nil {
		hint := "is this a PEM private key?"
		if sawCert {
			hint = "it holds a certificate: are cert and key swapped?"
		}
		return nil, &FileError{Path: path, Err: ErrNoKey, Hint: hint}
	}
	if block.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED") {
		return nil, &FileError{Path: path, Err: ErrEncryptedKey, Hint: "decrypt it, e.g. openssl pkey -in " + path + " -out plain.key"}
	}
	key, err := parseKey(block)
	if err != nil {
		return nil, &FileError{Path: path, Err: fmt.Errorf("%w: %w", ErrBadKey, err), Hint: "use an unencrypted PKCS#8, PKCS#1 or SEC 1 key"}
	}
	return key, nil
}

// parseKey tries the encoding the block type names first, then the others, as
// tls.X509KeyPair does: files are often labelled loosely.
func parseKey(b *pem.Block) (crypto.Signer, error) {
	var first error
	for _, parse := range keyParsers(b.Type) {
		k, err := parse(b.Bytes)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%T cannot sign", k)
		}
		return s, nil
	}
	return nil, first
}

func keyParsers(typ string) []func([]byte) (any, error) {
	pkcs8 := x509.ParsePKCS8PrivateKey
	pkcs1 := func(der []byte) (any, error) { return x509.ParsePKCS1PrivateKey(der) }
	sec1 := func(der []byte) (any, error) { return x509.ParseECPrivateKey(der) }
	switch typ {
	case "RSA PRIVATE KEY":
		return []func([]byte) (any, error){pkcs1, pkcs8, sec1}
	case "EC PRIVATE KEY":
		return []func([]byte) (any, error){sec1, pkcs8, pkcs1}
	default:
		return []func([]byte) (any, error){pkcs8, pkcs1, sec1}
	}
}
