package admission

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/quicconn"
)

// gateRig is a TLS listener over TCP's Listener on loopback, as the edge wires it:
// dial connects a TLS client in the background, accept returns the server side.
type gateRig struct {
	t   *testing.T
	tcp *TCP
	ln  net.Listener // TLS over tcp.Listener
	raw net.Listener
}

func newGateRig(t *testing.T, tcp *TCP, c *tls.Config) *gateRig {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return &gateRig{t: t, tcp: tcp, raw: raw, ln: tls.NewListener(tcp.Listener(raw), c)}
}

// dial starts a TLS client; its handshake's outcome arrives on the channel.
func (r *gateRig) dial() <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := tls.Dial("tcp", r.raw.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			r.t.Cleanup(func() { c.Close() })
		}
		done <- err
	}()
	return done
}

// accept returns the next server-side TLS connection and starts its handshake, whose
// outcome arrives on the channel.
func (r *gateRig) accept() (*tls.Conn, <-chan error) {
	r.t.Helper()
	c, err := r.ln.Accept()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	tc := c.(*tls.Conn)
	done := make(chan error, 1)
	go func() { done <- tc.Handshake() }()
	return tc, done
}

func waitErr(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting after 10 s", what)
		return nil
	}
}

// TestHandshakeGate, over real loopback TLS connections: with one slot, a second
// handshake waits while the first is in its CPU part (here: held in GetCertificate)
// and does none of that work; shed by the pending cap while it waits, it ends at once,
// without it; once the first handshake's flight is out (and as long again), the slot
// goes to the next.
// Without the gate, the second handshake runs at once (and here blocks in
// GetCertificate, so its shed does not end it).
func TestHandshakeGate(t *testing.T) {
	tcp := newTestTCP(t, nil)
	tcp.SetCaps(0, 1) // one pending connection: a new one sheds the one pending longest
	tcp.hold = time.Hour

	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS() // for its certificate
	defer ts.Close()
	cert := ts.TLS.Certificates[0]
	var calls atomic.Int32
	entered := make(chan struct{}, 4)
	unblock := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(unblock) }) }
	defer free()
	c := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if calls.Add(1) == 1 {
			entered <- struct{}{}
			<-unblock // the first handshake stays in its CPU part
		}
		return &cert, nil
	}}
	tcp.GateHandshakes(c, 1)
	r := newGateRig(t, tcp, c)

	aDone := r.dial()
	a, aHS := r.accept()
	<-entered                   // a holds the slot
	tcp.ServedConn(a.NetConn()) // no longer pending: the cap sheds b, not a
	bDone := r.dial()
	_, bHS := r.accept()
	testkit.WaitFor(t, 10*time.Second, "the second handshake to wait for the gate", func() bool {
		_, waiting := tcp.Handshakes()
		return waiting == 1
	})
	if holding, _ := tcp.Handshakes(); holding != 1 {
		t.Fatalf("%d handshakes hold a slot, want 1", holding)
	}
	cDone := r.dial()
	_, cHS := r.accept() // sheds b, pending while it waits for the slot
	if err := waitErr(t, "the shed handshake", bHS); !errors.Is(err, errGateEnded) {
		t.Errorf("the handshake shed while it waited for the gate ended with %v, want %v", err, errGateEnded)
	}
	waitErr(t, "the shed client", bDone)
	if n := calls.Load(); n != 1 {
		t.Errorf("GetCertificate called %d times while one handshake held the slot, want 1", n)
	}
	free()
	for _, hs := range []struct {
		name string
		srv  <-chan error
		cli  <-chan error
	}{{"first", aHS, aDone}, {"third", cHS, cDone}} {
		if err := waitErr(t, hs.name+" handshake", hs.srv); err != nil {
			t.Errorf("%s handshake: %v", hs.name, err)
		}
		if err := waitErr(t, hs.name+" client", hs.cli); err != nil {
			t.Errorf("%s client: %v", hs.name, err)
		}
	}
	// Each slot comes back as long after its flight as the CPU part took.
	testkit.WaitFor(t, 5*time.Second, "every slot to come back", func() bool {
		holding, waiting := tcp.Handshakes()
		return holding == 0 && waiting == 0
	})
	if r := tcp.Refused(); r.Pending != 1 {
		t.Errorf("refused %+v, want one shed", r)
	}
}

// TestSlowCharge: a connection shed by the pending cap charges its source once (not
// again when it closes), one closing still pending after the header timeout charges
// it, and neither a connection that brought a request nor one that closes pending
// sooner does — the rule package admission's slow.go states.
func TestSlowCharge(t *testing.T) {
	tcp := newTestTCP(t, nil)
	tcp.SetCaps(0, 2)
	var mu sync.Mutex
	charged := map[string]int{}
	headerTimeout := time.Hour
	tcp.SetCharge(headerTimeout, func(a netip.Addr, reason string) {
		mu.Lock()
		charged[reason]++
		mu.Unlock()
		if a != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("charged %v", a)
		}
	})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tcp.Listener(inner)
	defer ln.Close()
	dial := func() net.Conn {
		t.Helper()
		dialTCP(t, inner.Addr())
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	count := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{ReasonShed: charged[ReasonShed], ReasonIdle: charged[ReasonIdle]}
	}
	s1, s2 := dial(), dial()
	s3 := dial() // sheds s1
	if got := count(); got[ReasonShed] != 1 || got[ReasonIdle] != 0 {
		t.Fatalf("after a shed: charged %v, want one shed", got)
	}
	tcp.Release(s1) // the server reports the shed connection closed
	tcp.ServedConn(s2)
	tcp.Release(s2) // brought a request
	tcp.Release(s3) // pending, closed before the header timeout
	if got := count(); got[ReasonShed] != 1 || got[ReasonIdle] != 0 {
		t.Fatalf("after the closes: charged %v, want the one shed only", got)
	}
	tcp.SetCharge(time.Nanosecond, tcp.charge) // every pending connection is now past it
	s4 := dial()
	tcp.Release(s4)
	if got := count(); got[ReasonShed] != 1 || got[ReasonIdle] != 1 {
		t.Fatalf("after a pending connection past the header timeout closed: charged %v, want one of each", got)
	}
}

// newTestTCP returns a TCP admission of the default ip: budgets; banned reports the
// sources in the penalty box (nil: none).
func newTestTCP(t *testing.T, banned func(netip.Addr) bool) *TCP {
	t.Helper()
	cfg := config.Default()
	cfg.ApplyDefaults()
	g, err := quicconn.New(GuardConfig(cfg.IP))
	if err != nil {
		t.Fatal(err)
	}
	if banned == nil {
		banned = func(netip.Addr) bool { return false }
	}
	return NewTCP(g, banned)
}

// dialTCP connects to addr; the connection is closed when the test ends.
func dialTCP(t *testing.T, addr net.Addr) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
