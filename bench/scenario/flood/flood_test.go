package flood

import "testing"

// TestInitialToken: the token of a QUIC v1 Initial, and what is not one.
func TestInitialToken(t *testing.T) {
	// Long header Initial: flags, version 1, DCID (2 bytes), SCID (0), token length 3
	// (one-byte varint), token, then the rest.
	pkt := []byte{0xc3, 0, 0, 0, 1, 2, 0xaa, 0xbb, 0, 3, 't', 'o', 'k', 0x44, 0xd0}
	if tok, ok := InitialToken(pkt); !ok || string(tok) != "tok" {
		t.Errorf("token %q, %v", tok, ok)
	}
	noTok := []byte{0xc3, 0, 0, 0, 1, 1, 0xaa, 1, 0xbb, 0, 0x44, 0xd0}
	if tok, ok := InitialToken(noTok); !ok || len(tok) != 0 {
		t.Errorf("no token: %q, %v", tok, ok)
	}
	// A two-byte varint length (0x40 0x05 = 5) running past the end.
	if _, ok := InitialToken([]byte{0xc3, 0, 0, 0, 1, 0, 0, 0x40, 5, 'x'}); ok {
		t.Error("a truncated token parsed")
	}
	// A Handshake packet (type 2) is not an Initial.
	if _, ok := InitialToken([]byte{0xe3, 0, 0, 0, 1, 0, 0, 0, 0}); ok {
		t.Error("a Handshake packet parsed as an Initial")
	}
}
