package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter/penalty"
)

// sourceClient speaks proto from the loopback address src (127.0.0.2 …), so a test can
// play several clients. Every call opens new connections unless keep is set.
type sourceClient struct {
	t     testing.TB
	src   string
	proto string
	tr    *quic.Transport
}

func newSourceClient(t testing.TB, proto, src string) *sourceClient {
	c := &sourceClient{t: t, src: src, proto: proto}
	if proto == "h3" {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
		if err != nil {
			t.Fatal(err)
		}
		c.tr = &quic.Transport{Conn: udp}
		t.Cleanup(func() { c.tr.Close(); udp.Close() })
	}
	return c
}

// dial opens one connection to addr and returns a client bound to it, or the dial error.
func (c *sourceClient) dial(addr string) (*http.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c.proto == "h3" {
		conn, err := c.tr.Dial(ctx, mustUDPAddr(addr), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, &quic.Config{})
		if err != nil {
			return nil, err
		}
		c.t.Cleanup(func() { conn.CloseWithError(0, "") })
		cc := (&http3.Transport{}).NewClientConn(conn)
		return &http.Client{Transport: cc, Timeout: 5 * time.Second}, nil
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.src)}}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	c.t.Cleanup(func() { tc.Close() })
	used := false
	tr := &http.Transport{
		Protocols: new(http.Protocols),
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
			if used {
				return nil, errors.New("one connection only")
			}
			used = true
			return tc, nil
		},
	}
	tr.Protocols.SetHTTP2(true)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, nil
}

func mustUDPAddr(s string) *net.UDPAddr {
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		panic(err)
	}
	return a
}

func TestConnectionBudget(t *testing.T) {
	e := startEdge(t, func(c *config.Config) {
		c.IP.Connections = config.Rate{Rate: 0.001, Burst: 3} // three, then practically none
	})
	for _, proto := range []string{"h3", "h2"} {
		t.Run(proto, func(t *testing.T) {
			src := "127.0.0.2"
			if proto == "h2" {
				src = "127.0.0.3"
			}
			attacker := newSourceClient(t, proto, src)
			refused := 0
			for range 6 {
				if _, err := attacker.dial(e.Addr().String()); err != nil {
					var te *quic.TransportError
					if proto == "h3" && !(errors.As(err, &te) && te.ErrorCode == quic.ConnectionRefused) {
						t.Errorf("h3 refusal: %v, want CONNECTION_REFUSED", err)
					}
					refused++
				}
			}
			if refused != 3 {
				t.Errorf("%d of 6 connections refused, want 3", refused)
			}
			// Another source is unaffected.
			other := newSourceClient(t, proto, "127.0.0.9")
			c, err := other.dial(e.Addr().String())
			if err != nil {
				t.Fatalf("neighbour refused: %v", err)
			}
			resp, err := c.Get(e.url + "/")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("neighbour: %v %v", resp, err)
			}
			resp.Body.Close()
		})
	}
}

func TestStreamBudget(t *testing.T) {
	e := startEdge(t, func(c *config.Config) {
		c.IP.Streams = config.Rate{Rate: 0.001, Burst: 5}
		c.Policies = []config.Policy{{Name: "p", Key: []string{"ip"}, Quota: 1000, Window: time.Minute}}
	})
	pol := func() uint64 { st := e.rules.Load().Policies[0].Limiter.Stats(); return st.Allowed + st.Denied }
	for i, proto := range []string{"h3", "h2"} {
		t.Run(proto, func(t *testing.T) {
			src := []string{"127.0.0.4", "127.0.0.5"}[i]
			c, err := newSourceClient(t, proto, src).dial(e.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			before := pol()
			ok, rejected := 0, 0
			for range 8 {
				resp, err := c.Get(e.url + "/")
				switch {
				case err != nil:
					var se *http3.Error
					if proto == "h3" && errors.As(err, &se) && se.ErrorCode == http3.ErrCodeRequestRejected {
						rejected++
					} else {
						t.Errorf("%s: %v", proto, err)
					}
				case resp.StatusCode == 200:
					ok++
					resp.Body.Close()
				case resp.StatusCode == 429:
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.Header.Get("RateLimit") != "" || string(body) != `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests from this source"}` {
						t.Errorf("stream refusal is not the prebuilt 429: %q %s", resp.Header, body)
					}
					rejected++
				}
			}
			if ok != 5 || rejected != 3 {
				t.Errorf("%d served, %d refused; want 5 and 3", ok, rejected)
			}
			if evaluated := pol() - before; evaluated != 5 {
				t.Errorf("the policy decided %d requests, want 5: refused streams must not reach it", evaluated)
			}
			other, err := newSourceClient(t, proto, "127.0.0.10").dial(e.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := other.Get(e.url + "/"); err != nil || resp.StatusCode != 200 {
				t.Errorf("neighbour: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}
		})
	}
}

func TestPenaltyBoxEndToEnd(t *testing.T) {
	e := startEdge(t, func(c *config.Config) {
		c.Abuse = config.AbuseConfig{Rejections: 5, Within: 10 * time.Second, Ban: 500 * time.Millisecond, MaxBan: 4 * time.Second}
		c.Policies = []config.Policy{{Name: "per-ip", Key: []string{"ip"}, Quota: 2, Window: time.Second}}
	})
	addr := e.Addr().String()
	attacker := netip.MustParseAddr("127.0.0.20")
	neighbour, err := newSourceClient(t, "h3", "127.0.0.21").dial(addr)
	if err != nil {
		t.Fatal(err)
	}

	// earnBan sends requests over h3 from the attacker until its connection is closed
	// by the ban, and returns the ban, with bounds on its length: it began after the
	// first request and before the ban was seen.
	type earned struct {
		ban          penalty.Ban
		lower, upper time.Duration
	}
	earnBan := func() earned {
		t.Helper()
		before := time.Now()
		c, err := newSourceClient(t, "h3", attacker.String()).dial(addr)
		if err != nil {
			t.Fatalf("attacker dial: %v", err)
		}
		for range 50 {
			resp, err := c.Get(e.url + "/")
			if err != nil {
				break // kicked: the ban closed the connection
			}
			resp.Body.Close()
		}
		if !e.box.Banned(attacker) {
			t.Fatal("the attacker was not banned")
		}
		seen := time.Now()
		b := e.box.List(seen)[0]
		return earned{b, b.Until.Sub(seen), b.Until.Sub(before)}
	}
	first := earnBan()

	// Banned: handshakes go unanswered, TCP closes before TLS, the neighbour is served.
	st0 := e.guard.Stats() // dropped in user space, or in the kernel once the filter is set
	dropped := st0.DroppedBanned + st0.DroppedKernel
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	udp, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.20")})
	tr := &quic.Transport{Conn: udp}
	_, err = tr.Dial(ctx, mustUDPAddr(addr), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, &quic.Config{})
	cancel()
	tr.Close()
	udp.Close()
	if err == nil {
		t.Error("a banned source completed a QUIC handshake")
	}
	if st := e.guard.Stats(); st.DroppedBanned+st.DroppedKernel <= dropped {
		t.Error("dropped-datagram counter did not rise")
	}
	// Its TCP connection is held unanswered (package admission's tarpit): no TLS
	// handshake within the ban.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.20")}, Timeout: 150 * time.Millisecond}
	if c, err := tls.DialWithDialer(&d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}); err == nil {
		c.Close()
		t.Error("a banned source completed a TLS handshake over TCP")
	}
	resp, err := neighbour.Get(e.url + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("neighbour during the ban: %v %v", resp, err)
	}
	resp.Body.Close()

	// After the ban the source is served again (its bucket refilled meanwhile).
	testkit.WaitFor(t, 3*time.Second, "the ban to end", func() bool { return !e.box.Banned(attacker) })
	c, err := newSourceClient(t, "h3", "127.0.0.20").dial(addr)
	if err != nil {
		t.Fatalf("after the ban: %v", err)
	}
	if resp, err := c.Get(e.url + "/"); err != nil {
		t.Fatalf("after the ban: %v", err)
	} else {
		resp.Body.Close()
	}

	// A second offence: twice as long. (Exact lengths are TestPenaltyBanLength's, on a
	// fake clock; here the bounds of each must allow exactly double.)
	second := earnBan()
	if first.ban.Count != 1 || second.ban.Count != 2 || second.lower > 2*first.upper || second.upper < 2*first.lower {
		t.Errorf("first ban #%d of %v–%v, second #%d of %v–%v: want the second twice as long",
			first.ban.Count, first.lower, first.upper, second.ban.Count, second.lower, second.upper)
	}
}

// TestRetryUnderSurge floods the edge with handshakes from 200 loopback addresses: past
// ip.retry_above handshakes per second new sources must validate their address (Retry),
// and a legitimate client is still served.
func TestRetryUnderSurge(t *testing.T) {
	e := startEdge(t, func(c *config.Config) { c.IP.RetryAbove = 50 })
	addr := mustUDPAddr(e.Addr().String())
	tlsConf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, byte(1+i/250), byte(2+i%250))})
			if err != nil {
				t.Error(err)
				return
			}
			tr := &quic.Transport{Conn: udp}
			defer func() { tr.Close(); udp.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if conn, err := tr.Dial(ctx, addr, tlsConf, &quic.Config{}); err == nil {
				conn.CloseWithError(0, "")
			}
		})
	}
	wg.Wait()
	st := e.guard.Stats()
	if st.RetriesSurge == 0 {
		t.Errorf("no Retry was sent during a surge of 200 handshakes (stats %+v)", st)
	}
	c, err := newSourceClient(t, "h3", "127.0.0.250").dial(e.Addr().String())
	if err != nil {
		t.Fatalf("legitimate client during the surge: %v", err)
	}
	resp, err := c.Get(e.url + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("legitimate client: %v %v", resp, err)
	}
	resp.Body.Close()
	t.Logf("transport stats after the surge: %+v", st)
}
