package attack

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/h3edge/h3edge/certs"
)

// TestInitialFlood floods a quic-go server on loopback with 300 Initials from 300
// spoofed addresses: when the server asks for address validation every one gets a
// Retry (as many as quic-go's queue lets out), when it does not every one begins a handshake (its ServerHello opened by the
// attacker) — the Initials are ones quic-go takes, from the addresses they claim.
func TestInitialFlood(t *testing.T) {
	cert, err := certs.SelfSigned("localhost")
	if err != nil {
		t.Fatal(err)
	}
	for _, retry := range []bool{true, false} {
		t.Run(map[bool]string{true: "retry", false: "handshake"}[retry], func(t *testing.T) {
			udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			var seen, taken atomic.Int64
			var wrongSource atomic.Bool
			tr := &quic.Transport{Conn: udp,
				ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
					taken.Add(1)
					return ctx, nil
				},
				VerifySourceAddress: func(a net.Addr) bool {
					seen.Add(1)
					if ip := a.(*net.UDPAddr).IP.To4(); ip[1] != 64 {
						wrongSource.Store(true)
					}
					return retry
				}}
			defer tr.Close()
			ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h3"}},
				&quic.Config{HandshakeIdleTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			a, err := Lookup("quic-initial-flood")
			if err != nil {
				t.Fatal(err)
			}
			const n = 300
			out, err := a.Run(context.Background(), Target{
				Addr: netip.MustParseAddrPort(udp.LocalAddr().String()), Sources: []netip.Addr{netip.MustParseAddr("127.64.0.0")},
				TLS: &tls.Config{InsecureSkipVerify: true}, Duration: 10 * time.Second, Count: n, Rate: 1000,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v, server saw %d", out, seen.Load())
			if out.Sent != n {
				t.Errorf("sent %d, want %d", out.Sent, n)
			}
			if wrongSource.Load() {
				t.Error("an Initial came from outside 127.64.0.0/16")
			}
			// A loaded machine drops some: the socket's buffer overflows while the
			// server does the handshakes' TLS work. Every Initial it reads must be one
			// it takes. quic-go drops a Retry when its queue of 8 is full, so Retries
			// fall short of the Initials when they come in batches.
			if seen.Load() < n/3 {
				t.Errorf("the server saw %d of %d Initials", seen.Load(), n)
			}
			if retry && (out.Retries == 0 || out.Conns > 0) {
				t.Errorf("%d Retries and %d handshakes for %d Initials", out.Retries, out.Conns, n)
			}
			// Its ServerHellos may come after the attacker stopped listening on a loaded
			// machine: the server's count is the one asserted, the attacker's must show.
			if !retry && (taken.Load() < seen.Load()*9/10 || out.Conns == 0) {
				t.Errorf("%d connections taken and %d ServerHellos seen for the %d Initials the server read",
					taken.Load(), out.Conns, seen.Load())
			}
		})
	}
}
