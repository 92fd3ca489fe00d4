package quicpkt

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"testing"
)

// TestInitialKeys: the keys of RFC 9001 Appendix A.1, whose client Initial names the
// connection 0x8394c8f03e515708.
func TestInitialKeys(t *testing.T) {
	dcid, _ := hex.DecodeString("8394c8f03e515708")
	for _, c := range []struct {
		server  bool
		key, iv string
		hp      string
	}{
		{false, "1f369613dd76d5467730efcbe3b1a22d", "fa044b2f42a3fd3b46fb255c", "9f50449e04a0e810283a1e9933adedd2"},
		{true, "cf3a5331653c364c88f0f379b6067e37", "0ac1493ca1905853b0bba03e", "c206b8d9b9f0f37644430b490eeaa314"},
	} {
		initial, _ := hkdfExtract(dcid)
		label := map[bool]string{false: "client in", true: "server in"}[c.server]
		secret := expandLabel(initial, label, 32)
		if got := hex.EncodeToString(expandLabel(secret, "quic key", 16)); got != c.key {
			t.Errorf("server %v: key %s, want %s", c.server, got, c.key)
		}
		if got := hex.EncodeToString(expandLabel(secret, "quic iv", 12)); got != c.iv {
			t.Errorf("server %v: iv %s, want %s", c.server, got, c.iv)
		}
		if got := hex.EncodeToString(expandLabel(secret, "quic hp", 16)); got != c.hp {
			t.Errorf("server %v: hp %s, want %s", c.server, got, c.hp)
		}
	}
}

// TestInitialRoundTrip: an Initial built here opens with the client's keys to the
// CRYPTO frame it was given, is padded to 1200 bytes, and carries its token in the clear.
func TestInitialRoundTrip(t *testing.T) {
	dcid := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}
	hello, err := ClientHello(t.Context(), &tls.Config{ServerName: "localhost", NextProtos: []string{"h3"},
		CurvePreferences: []tls.CurveID{tls.X25519}, MinVersion: tls.VersionTLS13}, []byte{0xaa, 0xbb})
	if err != nil {
		t.Fatal(err)
	}
	if hello[0] != 1 { // handshake type client_hello
		t.Fatalf("ClientHello starts with %#x", hello[0])
	}
	in := Initial{DCID: dcid, SCID: []byte{0xaa, 0xbb}, Token: []byte("a token"), Crypto: hello, PN: 7}
	pkt := in.Append(nil)
	if len(pkt) != MinInitialSize {
		t.Errorf("datagram of %d bytes, want %d", len(pkt), MinInitialSize)
	}
	if !bytes.Contains(pkt, []byte("a token")) {
		t.Error("the token is not in the clear")
	}
	plain, err := openInitial(pkt, dcid, false)
	if err != nil {
		t.Fatal(err)
	}
	want := append(AppendVarint([]byte{0x06, 0x00}, uint64(len(hello))), hello...)
	if !bytes.HasPrefix(plain, want) {
		t.Errorf("payload starts %x, want the CRYPTO frame %x", plain[:16], want[:16])
	}
	if _, err := openInitial(pkt, []byte{9, 9, 9, 9, 9, 9, 9, 9}, false); err == nil {
		t.Error("opened with the keys of another connection ID")
	}
	if _, err := OpenServerInitial(pkt, dcid); err == nil {
		t.Error("a client Initial opened with the server's keys")
	}
}

// TestParseRetry: a Retry's SCID and token, and what is not a Retry.
func TestParseRetry(t *testing.T) {
	b := []byte{0xf0, 0, 0, 0, 1, 2, 0xa, 0xb, 3, 0xc, 0xd, 0xe}
	b = append(b, "tok"...)
	b = append(b, make([]byte, 16)...)
	r, err := ParseRetry(b)
	if err != nil || !bytes.Equal(r.SCID, []byte{0xc, 0xd, 0xe}) || string(r.Token) != "tok" {
		t.Fatalf("ParseRetry = %+v, %v", r, err)
	}
	b[0] = 0xc0 // an Initial
	if IsRetry(b) {
		t.Error("an Initial parsed as a Retry")
	}
	if IsRetry([]byte{0xf0, 0, 0}) {
		t.Error("three bytes parsed as a Retry")
	}
}

// FuzzOpenServerInitial: any datagram is read without a panic.
func FuzzOpenServerInitial(f *testing.F) {
	f.Add([]byte{0xc0, 0, 0, 0, 1, 1, 1, 0, 0, 0x40, 30}, []byte{1})
	f.Fuzz(func(t *testing.T, b, dcid []byte) {
		OpenServerInitial(b, dcid)
		ParseRetry(b)
	})
}
