package attack

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/h3edge/h3edge/bench/quicpkt"
)

// initialFlood sends Target.Count QUIC Initials, each from its own address counted up
// from Target.Sources[0] (127.64.0.0 onwards in h3bench: a million addresses of
// 127.0.0.0/8 that no other client uses), at Target.Rate per second — the flood of a
// spoofing attacker, who never answers what the server sends back.
//
// Each Initial is built here (bench/quicpkt), not replayed: a real ClientHello made once
// by crypto/tls's QUIC client, an 8-byte DCID of its own, so its own Initial keys, padded
// to 1200 bytes. A replayed capture with only the DCID changed would not open at the
// server, which would then stop before the TLS work a real spoofed Initial costs it
// whenever it does not ask for a Retry.
//
// The spoofing needs no raw socket: every 127.x.y.z is a local address on Linux, so one
// UDP socket bound to 0.0.0.0 sends each datagram from the address its IP_PKTINFO names
// (sendmmsg, batches of 64) and receives what h3edge sends back to any of them on the
// same port. The answers are counted but never acted on: a Retry (Outcome.Retries), a
// ServerHello (Outcome.Conns: a handshake h3edge began, a connection it holds until its
// handshake timeout) or a CONNECTION_CLOSE (Outcome.Refused), each source counted once.
func initialFlood(ctx context.Context, t *Target, rec *recorder) error {
	if t.Count <= 0 || t.Rate <= 0 || !t.Sources[0].Is4() {
		return errors.New("attack: quic-initial-flood needs Count, Rate and an IPv4 first source")
	}
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		return err
	}
	defer udp.Close()
	udp.SetReadBuffer(4 << 20)
	pc := ipv4.NewPacketConn(udp)
	if err := pc.SetControlMessage(ipv4.FlagDst, true); err != nil {
		return fmt.Errorf("attack: IP_PKTINFO: %w", err)
	}
	scid := []byte{0xa7, 0x7a, 0xc4, 0x00}
	tc := t.TLS.Clone()
	tc.NextProtos = []string{"h3"}
	tc.CurvePreferences = []tls.CurveID{tls.X25519} // one key share: one Initial per first flight
	hello, err := quicpkt.ClientHello(ctx, tc, scid)
	if err != nil {
		return err
	}
	base := binary.BigEndian.Uint32(t.Sources[0].AsSlice())
	addrAt := func(i uint32) netip.Addr {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], base+i)
		return netip.AddrFrom4(b)
	}
	// The DCID carries the source's index, so an answer to any source can be opened.
	dcidOf := func(src netip.Addr) []byte {
		d := []byte{0xf1, 0x00, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(d[4:], binary.BigEndian.Uint32(src.AsSlice())-base)
		return d
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stopReading := context.WithCancel(context.Background())
	wg.Go(func() { readAnswers(rctx, pc, dcidOf, rec) })
	defer func() {
		// Late answers: what h3edge had queued when the flood ended.
		time.Sleep(300 * time.Millisecond)
		stopReading()
		udp.SetReadDeadline(time.Now())
	}()

	dst := net.UDPAddrFromAddrPort(t.Addr)
	const batch = 64
	ms := make([]ipv4.Message, batch)
	bufs := make([][]byte, batch)
	start := time.Now()
	var sent uint32
	for sent < uint32(t.Count) && ctx.Err() == nil {
		// Pace: never ahead of Rate × elapsed.
		if due := time.Duration(float64(sent) / t.Rate * float64(time.Second)); due > time.Since(start) {
			time.Sleep(min(due-time.Since(start), 10*time.Millisecond))
			continue
		}
		n := min(batch, uint32(t.Count)-sent)
		for i := range n {
			src := addrAt(sent + i)
			bufs[i] = (&quicpkt.Initial{DCID: dcidOf(src), SCID: scid, Crypto: hello}).Append(bufs[i][:0])
			ms[i] = ipv4.Message{Buffers: [][]byte{bufs[i]}, Addr: dst,
				OOB: (&ipv4.ControlMessage{Src: src.AsSlice()}).Marshal()}
		}
		w, err := pc.WriteBatch(ms[:n], 0)
		if err != nil {
			rec.lastError.Store(err.Error())
			if w <= 0 {
				time.Sleep(time.Millisecond) // a full socket buffer: let it drain
				continue
			}
		}
		sent += uint32(w)
		rec.sent.Add(int64(w))
	}
	return nil
}

// readAnswers counts what the server sent to the spoofed sources until ctx ends.
func readAnswers(ctx context.Context, pc *ipv4.PacketConn, dcidOf func(netip.Addr) []byte, rec *recorder) {
	seen := map[netip.Addr]bool{} // sources answered with an Initial, counted once
	ms := make([]ipv4.Message, 32)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 2048)}
		ms[i].OOB = ipv4.NewControlMessage(ipv4.FlagDst)
	}
	for ctx.Err() == nil {
		n, err := pc.ReadBatch(ms, 0)
		if err != nil {
			return
		}
		for _, m := range ms[:n] {
			b := m.Buffers[0][:m.N]
			if quicpkt.IsRetry(b) {
				rec.retries.Add(1)
				continue
			}
			var cm ipv4.ControlMessage
			if cm.Parse(m.OOB[:m.NN]) != nil {
				continue
			}
			dst, ok := netip.AddrFromSlice(cm.Dst.To4())
			if !ok || seen[dst] {
				continue
			}
			si, err := quicpkt.OpenServerInitial(b, dcidOf(dst))
			if err != nil {
				continue
			}
			seen[dst] = true
			if si.Closed {
				rec.refused.Add(1)
			} else {
				rec.conns.Add(1)
			}
		}
	}
}
