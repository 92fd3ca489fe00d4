// Package admission is the TCP side of the per-source transport budgets (ip:, DESIGN
// §1): connections over their source's connection budget or cap are reset at accept,
// before any TLS work, those of banned sources held unanswered and then reset
// (tarpit.go), and the open ones are counted against
// their source's cap until the HTTP server is done with them. quicconn.Guard is the
// same budgets' QUIC side and their one state: TCP and QUIC connections of a source
// count together.
package admission

import (
	"container/list"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/quicconn"
)

// TCP admits TCP connections. Make it with NewTCP; it is safe for concurrent use.
type TCP struct {
	guard  *quicconn.Guard
	banned func(netip.Addr) bool
	// conns maps each open connection Accept returned to its slot, so that a ban can
	// close it and Release give the slot back.
	conns                                  sync.Map // net.Conn → *slot
	refusedBanned, refusedRate, refusedMax atomic.Uint64
	// shedding, if set, reports that the edge sheds new work (package overload):
	// new connections are reset at accept.
	shedding        func() bool
	refusedOverload atomic.Uint64

	// The global caps (caps.go): the counts and their bounds, the refusals, and the
	// pending connections oldest first (under mu).
	open, pending, maxOpen, maxPending atomic.Int64
	refusedOpen, refusedPending        atomic.Uint64
	mu                                 sync.Mutex
	queue                              list.List // of *slot

	// slots is the handshake gate (handshake.go): a token per handshake in its CPU
	// part, kept at most hold (handshakeHold; tests set it); nil: not gated.
	slots   chan struct{}
	hold    time.Duration
	waiting atomic.Int64
	// charge, if set, charges the source of a connection that ended without making
	// progress (slow.go); headerTimeout is the header read timeout it judges by.
	charge        func(addr netip.Addr, reason string)
	headerTimeout time.Duration
	// tarpit holds the connections of banned sources (tarpit.go).
	tarpit tarpit
}

// slot is an open TCP connection's place in its source's count.
type slot struct {
	slot    *quicconn.Slot
	addr    netip.Addr
	since   time.Time     // accepted
	pending atomic.Bool   // no request has reached the chain yet (Served)
	conn    net.Conn      // as accepted, to be reset when shed
	elem    *list.Element // in TCP.queue while pending; under TCP.mu

	// ended is closed once the connection is shed, kicked or released (end): a
	// handshake waiting for the gate stops waiting. shed tells that the pending cap
	// ended it (charged then, not again when it closes).
	ended  chan struct{}
	ending atomic.Bool
	shed   bool        // under TCP.mu
	gate   atomic.Bool // holds a handshake slot (handshake.go)
	gateAt time.Time   // since when; by the handshake's goroutine
}

// end marks the connection ended, once.
func (s *slot) end() {
	if s.ending.CompareAndSwap(false, true) {
		close(s.ended)
	}
}

// NewTCP returns the TCP admission of guard's budgets; banned reports a source in the
// penalty box.
func NewTCP(guard *quicconn.Guard, banned func(netip.Addr) bool) *TCP {
	return &TCP{guard: guard, banned: banned, tarpit: tarpit{hold: tarpitHold, max: tarpitSize()}}
}

// SetShedding makes Accept reset every new connection while shedding reports true
// (the edge's overload sampler). Call it before the listener serves.
func (t *TCP) SetShedding(shedding func() bool) { t.shedding = shedding }

// Listener returns ln with t's admission at Accept.
func (t *TCP) Listener(ln net.Listener) net.Listener { return listener{Listener: ln, t: t} }

type listener struct {
	net.Listener
	t *TCP
}

func (l listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.t.admit(c) {
			return c, nil
		}
	}
}

// admit counts c against its source, or resets it and counts the refusal.
func (t *TCP) admit(c net.Conn) bool {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return true
	}
	addr := ap.Addr().Unmap()
	if t.banned(addr) {
		t.refusedBanned.Add(1)
		t.tarpit.put(c)
		return false
	}
	if t.shedding != nil && t.shedding() {
		t.refusedOverload.Add(1)
		reset(c)
		return false
	}
	now := time.Now()
	s, err := t.guard.Admit(addr, now)
	if err != nil {
		if errors.Is(err, quicconn.ErrMaxConns) {
			t.refusedMax.Add(1)
		} else {
			t.refusedRate.Add(1)
		}
		reset(c)
		return false
	}
	// The connection itself goes to the server, unwrapped: a wrapper's extra frame on
	// every write pushed HTTP/2's frame-writing goroutines past their initial stack (a
	// stack copy per flush). Its slot is found again by the conn when the server
	// reports it closed (Release).
	sl := &slot{slot: s, addr: addr, since: now, conn: c, ended: make(chan struct{})}
	sl.pending.Store(true)
	if !t.enter(c, sl) {
		s.Release()
		reset(c)
		return false
	}
	t.conns.Store(c, sl)
	if t.banned(addr) { // banned meanwhile, by the charge of a connection shed for c
		t.refusedBanned.Add(1)
		t.Release(c)
		t.tarpit.put(c)
		return false
	}
	return true
}

// Release gives the slot of c — a connection Accept returned, unwrapped of TLS and
// the like — back when the HTTP server is done with it (closed, or hijacked: then its
// new owner is no longer an HTTP connection). Other connections are ignored.
func (t *TCP) Release(c net.Conn) {
	if v, ok := t.conns.LoadAndDelete(c); ok {
		s := v.(*slot)
		s.end()
		t.ungate(s)
		s.slot.Release()
		t.open.Add(-1)
		if s.pending.CompareAndSwap(true, false) {
			if !t.leave(s) {
				t.chargeIdle(s)
			}
		}
	}
}

// Open returns how many connections Accept returned are still open (not yet
// released).
func (t *TCP) Open() int { return int(t.open.Load()) }

// Kick closes the open TCP connections of sources in p (a new ban) and returns how
// many it closed. Bans are rare; the walk is over open connections only.
func (t *TCP) Kick(p netip.Prefix) int {
	n := 0
	t.conns.Range(func(k, v any) bool {
		if s := v.(*slot); p.Contains(s.addr) {
			s.end()             // a handshake waiting for the gate stops
			reset(k.(net.Conn)) // the server then reports it closed: Release gives it back
			n++
		}
		return true
	})
	return n
}

// Refused counts the TCP connections reset at accept since start, by reason: the
// source was banned, over its connection budget (rate), or at its cap.
type Refused struct {
	Banned, Rate, MaxConns uint64
	// Open and Pending: over limits.max_connections, max_pending_connections.
	Open, Pending uint64
	// Overload: while the edge shed new work (SetShedding).
	Overload uint64
}

// Refused returns the refusals so far.
func (t *TCP) Refused() Refused {
	return Refused{Banned: t.refusedBanned.Load(), Rate: t.refusedRate.Load(), MaxConns: t.refusedMax.Load(),
		Open: t.refusedOpen.Load(), Pending: t.refusedPending.Load(), Overload: t.refusedOverload.Load()}
}

// reset closes c with a RST (SO_LINGER 0): no FIN handshake to wait for.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// NewGuard builds the per-source transport budgets of the ip: section; banned reports
// a source in the penalty box.
func NewGuard(c config.IPConfig, banned func(netip.Addr) bool) (*quicconn.Guard, error) {
	gc := GuardConfig(c)
	gc.Banned = banned
	return quicconn.New(gc)
}

// GuardConfig translates the ip: section into the guard's budgets (without Banned).
func GuardConfig(c config.IPConfig) quicconn.Config {
	return quicconn.Config{
		ConnRate:       c.Connections.Rate,
		ConnBurst:      c.Connections.Burst,
		StreamRate:     c.Streams.Rate,
		StreamBurst:    c.Streams.Burst,
		MaxConnections: c.MaxConnections,
		RetryAbove:     float64(c.RetryAbove),
		MaxTracked:     c.MaxTracked,
		IPv4Prefix:     c.IPv4Prefix,
		IPv6Prefix:     c.IPv6Prefix,
	}
}
