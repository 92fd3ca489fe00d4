package edge

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

// Raw protocol pieces for cases real clients refuse to produce: a POST in 0-RTT data on
// HTTP/3, and a handshake held open so the server processes that data before the
// handshake completes (as it would for a replayed flight).

func makeTempDir() (string, error) { return os.MkdirTemp("", "h3edge-test-") }

// rawH3Request sends a request without body on conn — which may still be in its
// handshake, so the request travels in 0-RTT data — and returns the response status.
// quic-go's own client sends only GET and HEAD early; this one sends any method.
func rawH3Request(t testing.TB, ctx context.Context, conn *quic.Conn, method, authority, path string) int {
	t.Helper()
	return rawH3Status(t, rawH3Send(t, ctx, conn, method, authority, path))
}

// rawH3Send opens a request stream on conn and writes a HEADERS frame and FIN.
func rawH3Send(t testing.TB, ctx context.Context, conn *quic.Conn, method, authority, path string) *quic.Stream {
	t.Helper()
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fields bytes.Buffer
	enc := qpack.NewEncoder(&fields)
	for _, f := range [][2]string{{":method", method}, {":scheme", "https"}, {":authority", authority}, {":path", path}} {
		enc.WriteField(qpack.HeaderField{Name: f[0], Value: f[1]})
	}
	frame := quicvarint.Append(nil, 0x01) // HEADERS
	frame = quicvarint.Append(frame, uint64(fields.Len()))
	frame = append(frame, fields.Bytes()...)
	if _, err := str.Write(frame); err != nil {
		t.Fatal(err)
	}
	str.Close()
	return str
}

// rawH3Status reads the response on str and returns its status.
func rawH3Status(t testing.TB, str *quic.Stream) int {
	t.Helper()
	str.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := quicvarint.NewReader(str)
	for {
		typ, err := quicvarint.Read(r)
		if err != nil {
			t.Fatalf("reading HTTP/3 frame: %v", err)
		}
		length, err := quicvarint.Read(r)
		if err != nil {
			t.Fatal(err)
		}
		payload := make([]byte, length)
		if _, err := io.ReadFull(r, payload); err != nil {
			t.Fatal(err)
		}
		if typ != 0x01 {
			continue
		}
		next := qpack.NewDecoder().Decode(payload)
		for {
			hf, err := next()
			if err != nil {
				break
			}
			if hf.Name == ":status" {
				n, _ := strconv.Atoi(hf.Value)
				return n
			}
		}
		t.Fatal("HEADERS without :status")
	}
}

// handshakeHolder is a UDP relay between a QUIC client and server that forwards the
// client's first flight (Initial and 0-RTT packets) and holds every later client
// datagram — the one carrying the client's Finished — until release. The server thus
// handles the 0-RTT request before its handshake completes, deterministically; an
// attacker replaying a captured first flight puts the server in exactly this state.
//
// The server's datagrams to the client are gated too (Gate, OpenAfterNext): once the
// client has the server's handshake flight it has 1-RTT keys, and quic-go sends data
// written after that in 1-RTT packets, which the relay holds — a request written a
// moment late would never reach the server. Gated, the client can only send in 0-RTT.
type handshakeHolder struct {
	conn    *net.UDPConn
	server  *net.UDPAddr
	mu      sync.Mutex
	client  *net.UDPAddr
	held    [][]byte
	release bool

	gated    bool // the server's datagrams wait in toClient
	toClient [][]byte
	sent     int // client first-flight datagrams forwarded
	openAt   int // open the gate once sent reaches it (0: not asked)
}

// Gate holds the server's datagrams to the client until OpenAfterNext opens it. Call it
// before the client dials.
func (h *handshakeHolder) Gate() {
	h.mu.Lock()
	h.gated = true
	h.mu.Unlock()
}

// Sent returns how many client first-flight datagrams were forwarded so far.
func (h *handshakeHolder) Sent() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent
}

// OpenAfter opens the gate once more than n client first-flight datagrams have been
// forwarded: with n from Sent before a write, the 0-RTT datagram that carries it.
func (h *handshakeHolder) OpenAfter(n int) {
	h.mu.Lock()
	h.openAt = n + 1
	out := h.openLocked()
	h.mu.Unlock()
	h.toClientSend(out)
}

// openLocked opens the gate if its condition holds and returns what it held.
func (h *handshakeHolder) openLocked() [][]byte {
	if !h.gated || h.openAt == 0 || h.sent < h.openAt || h.client == nil {
		return nil
	}
	out := h.toClient
	h.gated, h.toClient = false, nil
	return out
}

func (h *handshakeHolder) toClientSend(out [][]byte) {
	h.mu.Lock()
	client := h.client
	h.mu.Unlock()
	for _, p := range out {
		h.conn.WriteToUDP(p, client)
	}
}

func newHandshakeHolder(t testing.TB, server string) *handshakeHolder {
	t.Helper()
	srv, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	h := &handshakeHolder{conn: c, server: srv}
	t.Cleanup(func() { c.Close() })
	go h.relay()
	return h
}

func (h *handshakeHolder) Addr() string { return h.conn.LocalAddr().String() }

func (h *handshakeHolder) relay() {
	buf := make([]byte, 2048)
	for {
		n, from, err := h.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		pkt := append([]byte(nil), buf[:n]...)
		if from.Port == h.server.Port && from.IP.Equal(h.server.IP) {
			h.mu.Lock()
			client, gated := h.client, h.gated
			if gated {
				h.toClient = append(h.toClient, pkt)
			}
			h.mu.Unlock()
			if client != nil && !gated {
				h.conn.WriteToUDP(pkt, client)
			}
			continue
		}
		h.mu.Lock()
		h.client = from
		hold := !h.release && !firstFlight(pkt)
		if hold {
			h.held = append(h.held, pkt)
		}
		h.mu.Unlock()
		if !hold {
			h.conn.WriteToUDP(pkt, h.server)
			h.mu.Lock()
			h.sent++
			out := h.openLocked()
			h.mu.Unlock()
			h.toClientSend(out)
		}
	}
}

// Release forwards what was held and everything after it.
func (h *handshakeHolder) Release() {
	h.mu.Lock()
	held := h.held
	h.held, h.release = nil, true
	h.mu.Unlock()
	for _, p := range held {
		h.conn.WriteToUDP(p, h.server)
	}
}

// firstFlight reports whether a datagram holds only QUIC v1 Initial and 0-RTT packets
// (long headers of type 0 and 1), walking coalesced packets by their Length fields.
func firstFlight(d []byte) bool {
	for len(d) > 0 {
		if d[0]&0x80 == 0 { // short header: 1-RTT
			return false
		}
		typ := (d[0] >> 4) & 3
		if typ != 0 && typ != 1 {
			return false
		}
		p := 5 // first byte, version
		if p >= len(d) {
			return false
		}
		p += 1 + int(d[p]) // DCID
		if p >= len(d) {
			return false
		}
		p += 1 + int(d[p]) // SCID
		if typ == 0 {      // Initial: token
			tl, n, err := quicvarint.Parse(d[p:])
			if err != nil {
				return false
			}
			p += n + int(tl)
		}
		if p > len(d) {
			return false
		}
		length, n, err := quicvarint.Parse(d[p:])
		if err != nil {
			return false
		}
		p += n + int(length)
		if p > len(d) {
			return false
		}
		d = d[p:]
	}
	return true
}
