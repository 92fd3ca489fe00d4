// Package quicpkt builds and reads the few QUIC version 1 packets an attack client
// needs without a QUIC stack: client Initials carrying a real TLS ClientHello and any
// token the caller chooses (RFC 9000 §17.2.2, protected as RFC 9001 §5 says), Retry
// packets (§17.2.5), and the server's Initial, opened to tell a handshake from a
// CONNECTION_CLOSE. quic-go does not export its packet building, and a test of forged
// Retry tokens or a flood from spoofed sources must choose the token, the connection
// IDs and the source address of every datagram itself.
//
// It uses the standard library only (crypto/hkdf, AES-GCM, crypto/tls's QUIC API).
package quicpkt

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
)

// Version1 is QUIC version 1 (RFC 9000).
const Version1 = 0x00000001

// MinInitialSize is the smallest datagram a client Initial may be sent in (RFC 9000
// §14.1); servers drop smaller ones.
const MinInitialSize = 1200

// Transport error codes of RFC 9000 §20.1 that a server's CONNECTION_CLOSE carries here.
const (
	ConnectionRefused = 0x02
	InvalidToken      = 0x0b
)

// ErrPacket reports a datagram that is not the packet asked for.
var ErrPacket = errors.New("quicpkt: malformed packet")

// initialSalt is RFC 9001 §5.2's salt for version 1.
var initialSalt = []byte{0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17,
	0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a}

// keys are one direction's Initial packet protection.
type keys struct {
	aead cipher.AEAD
	iv   [12]byte
	hp   cipher.Block
}

// expandLabel is TLS 1.3's HKDF-Expand-Label with an empty context (RFC 8446 §7.1).
func expandLabel(secret []byte, label string, n int) []byte {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = binary.BigEndian.AppendUint16(info, uint16(n))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0)
	out, err := hkdf.Expand(sha256.New, secret, string(info), n)
	if err != nil {
		panic(err) // n is at most 32: cannot fail
	}
	return out
}

func hkdfExtract(dcid []byte) ([]byte, error) { return hkdf.Extract(sha256.New, dcid, initialSalt) }

// initialKeys derives the Initial keys of the connection the client named dcid
// (RFC 9001 §5.2): the client's for server false, the server's for true.
func initialKeys(dcid []byte, server bool) *keys {
	initial, err := hkdfExtract(dcid)
	if err != nil {
		panic(err)
	}
	label := "client in"
	if server {
		label = "server in"
	}
	secret := expandLabel(initial, label, 32)
	block, _ := aes.NewCipher(expandLabel(secret, "quic key", 16))
	aead, _ := cipher.NewGCM(block)
	hp, _ := aes.NewCipher(expandLabel(secret, "quic hp", 16))
	k := &keys{aead: aead, hp: hp}
	copy(k.iv[:], expandLabel(secret, "quic iv", 12))
	return k
}

func (k *keys) nonce(pn uint64) []byte {
	var n [12]byte
	n = k.iv
	for i := range 8 {
		n[11-i] ^= byte(pn >> (8 * i))
	}
	return n[:]
}

// mask is the header protection mask of the packet whose sample is b[:16].
func (k *keys) mask(sample []byte) [16]byte {
	var m [16]byte
	k.hp.Encrypt(m[:], sample[:16])
	return m
}

// Initial is a client Initial to build.
type Initial struct {
	DCID, SCID []byte // connection IDs; DCID at least 8 bytes for a server to take it
	Token      []byte // the token field (a Retry or NEW_TOKEN token); nil for none
	Crypto     []byte // CRYPTO frame data at offset 0: the ClientHello
	PN         uint32 // packet number, sent in 4 bytes
}

// Append appends the protected Initial, padded to MinInitialSize, to dst.
func (in *Initial) Append(dst []byte) []byte {
	start := len(dst)
	const pnLen = 4
	b := append(dst, 0xc0|(pnLen-1)) // long header, fixed bit, type Initial
	b = binary.BigEndian.AppendUint32(b, Version1)
	b = append(b, byte(len(in.DCID)))
	b = append(b, in.DCID...)
	b = append(b, byte(len(in.SCID)))
	b = append(b, in.SCID...)
	b = AppendVarint(b, uint64(len(in.Token)))
	b = append(b, in.Token...)
	// Payload: one CRYPTO frame, then PADDING up to the datagram's minimum size.
	frame := []byte{0x06, 0x00} // CRYPTO, offset 0
	frame = AppendVarint(frame, uint64(len(in.Crypto)))
	frame = append(frame, in.Crypto...)
	overhead := len(b) - start + 2 + pnLen + 16 // length field (2 bytes), PN, AEAD tag
	payload := max(len(frame), MinInitialSize-overhead)
	b = binary.BigEndian.AppendUint16(b, 0x4000|uint16(pnLen+payload+16))
	pnOff := len(b)
	b = binary.BigEndian.AppendUint32(b, in.PN)
	hdr := b[start:]
	plain := make([]byte, payload)
	copy(plain, frame)
	k := initialKeys(in.DCID, false)
	b = k.aead.Seal(b, k.nonce(uint64(in.PN)), plain, hdr)
	m := k.mask(b[pnOff+4:])
	b[start] ^= m[0] & 0x0f
	for i := range pnLen {
		b[pnOff+i] ^= m[1+i]
	}
	return b
}

// longHeader is the invariant part of a long header packet.
type longHeader struct {
	typ        byte // 0 Initial, 1 0-RTT, 2 Handshake, 3 Retry
	version    uint32
	dcid, scid []byte
	rest       []byte // what follows the connection IDs
}

func parseLong(b []byte) (longHeader, error) {
	var h longHeader
	if len(b) < 7 || b[0]&0x80 == 0 {
		return h, fmt.Errorf("%w: not a long header", ErrPacket)
	}
	h.typ = b[0] >> 4 & 0x03
	h.version = binary.BigEndian.Uint32(b[1:5])
	p := b[5:]
	take := func() ([]byte, bool) {
		if len(p) < 1 || len(p) < 1+int(p[0]) || p[0] > 20 {
			return nil, false
		}
		id := p[1 : 1+int(p[0])]
		p = p[1+int(p[0]):]
		return id, true
	}
	var ok1, ok2 bool
	h.dcid, ok1 = take()
	h.scid, ok2 = take()
	if !ok1 || !ok2 {
		return h, fmt.Errorf("%w: connection IDs", ErrPacket)
	}
	h.rest = p
	return h, nil
}

// Retry is a server's Retry packet.
type Retry struct {
	// SCID is the server's new connection ID: the client's next Initial goes to it.
	SCID []byte
	// Token goes into the client's next Initial.
	Token []byte
}

// ParseRetry reads b as a Retry packet. It does not check the integrity tag.
func ParseRetry(b []byte) (*Retry, error) {
	h, err := parseLong(b)
	if err != nil {
		return nil, err
	}
	if h.typ != 3 || h.version != Version1 || len(h.rest) < 16 {
		return nil, fmt.Errorf("%w: not a version 1 Retry", ErrPacket)
	}
	return &Retry{SCID: clone(h.scid), Token: clone(h.rest[:len(h.rest)-16])}, nil
}

// IsRetry reports whether b is a version 1 Retry packet.
func IsRetry(b []byte) bool {
	_, err := ParseRetry(b)
	return err == nil
}

// ServerInitial is what a server's Initial packet says.
type ServerInitial struct {
	// Closed is true when the packet carries a CONNECTION_CLOSE; Code is its error.
	Closed bool
	Code   uint64
	// Crypto is true when it carries CRYPTO data: the ServerHello, the handshake going on.
	Crypto bool
}

// OpenServerInitial opens the server's Initial at the start of datagram b, sent on
// the connection the client's Initial named dcid (the DCID of the client's Initial the
// server answers: after a Retry, the Retry's SCID), and reports what it carries.
func OpenServerInitial(b, dcid []byte) (*ServerInitial, error) {
	plain, err := openInitial(b, dcid, true)
	if err != nil {
		return nil, err
	}
	return readFrames(plain)
}

// openInitial removes the protection of the Initial at the start of b, with the server's
// keys or the client's, and returns its payload.
func openInitial(b, dcid []byte, server bool) ([]byte, error) {
	h, err := parseLong(b)
	if err != nil {
		return nil, err
	}
	if h.typ != 0 || h.version != Version1 {
		return nil, fmt.Errorf("%w: not a version 1 Initial", ErrPacket)
	}
	p := h.rest
	tokLen, n := Varint(p)
	if n == 0 || uint64(len(p)-n) < tokLen {
		return nil, fmt.Errorf("%w: token length", ErrPacket)
	}
	p = p[n+int(tokLen):]
	length, n := Varint(p)
	if n == 0 || uint64(len(p)-n) < length || length < 20 {
		return nil, fmt.Errorf("%w: length", ErrPacket)
	}
	pnOff := len(b) - len(p) + n
	end := pnOff + int(length)
	pkt := append([]byte(nil), b[:end]...)
	k := initialKeys(dcid, server)
	m := k.mask(pkt[pnOff+4:])
	pkt[0] ^= m[0] & 0x0f
	pnLen := int(pkt[0]&0x03) + 1
	var pn uint64
	for i := range pnLen {
		pkt[pnOff+i] ^= m[1+i]
		pn = pn<<8 | uint64(pkt[pnOff+i])
	}
	plain, err := k.aead.Open(nil, k.nonce(pn), pkt[pnOff+pnLen:], pkt[:pnOff+pnLen])
	if err != nil {
		return nil, fmt.Errorf("%w: cannot open: %v", ErrPacket, err)
	}
	return plain, nil
}

// readFrames walks the frames an Initial may carry (RFC 9000 §12.4: PADDING, PING,
// ACK, CRYPTO, CONNECTION_CLOSE).
func readFrames(p []byte) (*ServerInitial, error) {
	var si ServerInitial
	bad := fmt.Errorf("%w: frames", ErrPacket)
	next := func() (uint64, bool) {
		v, n := Varint(p)
		p = p[n:]
		return v, n > 0
	}
	for len(p) > 0 {
		typ, _ := next()
		switch {
		case typ == 0x00 || typ == 0x01: // PADDING, PING
		case typ == 0x02 || typ == 0x03: // ACK: largest, delay, count, first range, ranges
			var vals [4]uint64
			for i := range vals {
				v, ok := next()
				if !ok {
					return nil, bad
				}
				vals[i] = v
			}
			for range 2 * vals[2] {
				if _, ok := next(); !ok {
					return nil, bad
				}
			}
			if typ == 0x03 {
				for range 3 {
					if _, ok := next(); !ok {
						return nil, bad
					}
				}
			}
		case typ == 0x06: // CRYPTO
			_, ok1 := next()
			l, ok2 := next()
			if !ok1 || !ok2 || uint64(len(p)) < l {
				return nil, bad
			}
			p = p[l:]
			si.Crypto = true
		case typ == 0x1c: // CONNECTION_CLOSE (transport)
			code, ok1 := next()
			_, ok2 := next() // frame type
			l, ok3 := next()
			if !ok1 || !ok2 || !ok3 || uint64(len(p)) < l {
				return nil, bad
			}
			p = p[l:]
			si.Closed, si.Code = true, code
		default:
			return nil, fmt.Errorf("%w: frame type %#x in an Initial", ErrPacket, typ)
		}
	}
	return &si, nil
}

// ClientHello returns the first flight of a TLS 1.3 client in QUIC (RFC 9001 §4.1),
// with the transport parameters RFC 9000 §18 requires of a client: its
// initial_source_connection_id, scid, and an idle timeout. tc should offer one key
// share small enough for one Initial (CurvePreferences: X25519).
func ClientHello(ctx context.Context, tc *tls.Config, scid []byte) ([]byte, error) {
	c := tls.QUICClient(&tls.QUICConfig{TLSConfig: tc})
	var tp []byte
	tp = AppendVarint(tp, 0x0f) // initial_source_connection_id
	tp = AppendVarint(tp, uint64(len(scid)))
	tp = append(tp, scid...)
	tp = AppendVarint(tp, 0x01) // max_idle_timeout, ms
	tp = AppendVarint(tp, 2)
	tp = binary.BigEndian.AppendUint16(tp, 0x4000|10000)
	c.SetTransportParameters(tp)
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("quicpkt: ClientHello: %w", err)
	}
	defer c.Close()
	var hello []byte
	for {
		ev := c.NextEvent()
		switch ev.Kind {
		case tls.QUICNoEvent:
			if len(hello) == 0 {
				return nil, errors.New("quicpkt: ClientHello: TLS wrote nothing")
			}
			return hello, nil
		case tls.QUICWriteData:
			if ev.Level == tls.QUICEncryptionLevelInitial {
				hello = append(hello, ev.Data...)
			}
		}
	}
}

// AppendVarint appends v as a QUIC variable-length integer (RFC 9000 §16).
func AppendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return binary.BigEndian.AppendUint16(b, 0x4000|uint16(v))
	case v < 1<<30:
		return binary.BigEndian.AppendUint32(b, 0x80000000|uint32(v))
	default:
		return binary.BigEndian.AppendUint64(b, 0xc000000000000000|v&(1<<62-1))
	}
}

// Varint reads a QUIC variable-length integer; n is 0 when b is too short.
func Varint(b []byte) (v uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	n = 1 << (b[0] >> 6)
	if len(b) < n {
		return 0, 0
	}
	v = uint64(b[0] & 0x3f)
	for _, c := range b[1:n] {
		v = v<<8 | uint64(c)
	}
	return v, n
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
