package quicconn_test

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/h3edge/h3edge/quicconn"
)

func ExampleGuard_AllowStream() {
	g, err := quicconn.New(quicconn.Config{StreamRate: 2, StreamBurst: 3})
	if err != nil {
		panic(err)
	}
	client := netip.MustParseAddr("2001:db8:1:2::7")
	t0 := time.Date(2026, 5, 23, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 0, 250 * time.Millisecond, 500 * time.Millisecond} {
		fmt.Print(g.AllowStream(client, t0.Add(at)), " ")
	}
	// Another address of the same /64 shares the budget.
	fmt.Println(g.AllowStream(netip.MustParseAddr("2001:db8:1:2::8"), t0.Add(500*time.Millisecond)))
	fmt.Println(g.Stats().RefusedStreams, "refused")
	// Output:
	// true true true false false true false
	// 3 refused
}

func ExampleGuard_Admit() {
	g, _ := quicconn.New(quicconn.Config{ConnRate: 1, ConnBurst: 2, MaxConnections: 2})
	client := netip.MustParseAddr("192.0.2.1")
	now := time.Date(2026, 5, 23, 12, 0, 0, 0, time.UTC)

	a, _ := g.Admit(client, now)
	_, _ = g.Admit(client, now)
	_, err := g.Admit(client, now)
	fmt.Println(err)
	a.Release()
	_, err = g.Admit(client, now)
	fmt.Println(err)
	fmt.Println(g.Stats().Open, "open")
	// Output:
	// quicconn: source at its connection cap
	// quicconn: source over its connection budget
	// 1 open
}

// The edge's wiring: the filtered socket, the two admission hooks, and the listener
// that registers connections for Kick.
func ExampleGuard_WrapConn() {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		panic(err)
	}
	defer udp.Close()
	g, _ := quicconn.New(quicconn.Config{})
	tr := &quic.Transport{
		Conn:                g.WrapConn(udp),
		ConnContext:         g.ConnContext,
		VerifySourceAddress: g.VerifySourceAddress,
	}
	// ln, _ := tr.ListenEarly(tlsConf, qconf)
	// go h3srv.ServeListener(g.Listener(ln))
	// Per new request stream: g.AllowStream(clientIP, time.Now()).
	// On a new ban: g.Kick(prefix).

	_, fast := tr.Conn.(quic.OOBCapablePacketConn)
	fmt.Println("OOB fast path:", fast)
	// Output:
	// OOB fast path: true
}
