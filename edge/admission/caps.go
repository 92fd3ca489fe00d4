package admission

import (
	"context"
	"errors"
	"net"
	"runtime"
	"syscall"

	"github.com/h3edge/h3edge/edge/config"
)

// The global caps (limits.max_connections, limits.max_pending_connections): what the
// per-source budgets cannot bound when the attackers are many sources. Both are
// checked at accept, before any TLS work, where a refusal is a reset and costs
// nothing else: a slow client's connection costs h3edge a TLS handshake (the bulk of
// its CPU under slowloris: X25519MLKEM768 and a signature, a few hundred µs), a
// goroutine and its buffers (~100 KiB held), and a burst of thousands of handshakes
// is what delays the legitimate requests behind it. A connection is pending from
// accept until its first request reaches the chain (Served): slowloris's connections
// never leave that state, a legitimate client's leave it within a round trip or two.

// SetCaps sets the caps: at most open connections at once, of which at most pending
// have not brought a request yet; zero or less: not capped. A lowered cap refuses new
// connections only; those open stay.
func (t *TCP) SetCaps(open, pending int) {
	t.maxOpen.Store(int64(open))
	t.maxPending.Store(int64(pending))
}

// MachineCaps returns the caps sized from the machine, the defaults of
// limits.max_connections and max_pending_connections: 4 096 open connections per
// core of GOMAXPROCS, at most three quarters of the file descriptors the process may
// open (the rest for upstreams, files and QUIC), and 256 pending ones per core — about
// 100 ms of that core's handshake work, so that legitimate requests never queue
// behind more than that.
func MachineCaps() (open, pending int) {
	procs := runtime.GOMAXPROCS(0)
	open = 4096 * procs
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
		open = min(open, int(min(rl.Cur, 1<<30)*3/4))
	}
	return open, min(256*procs, open)
}

// enter counts c (its slot s) in, and sheds to make room: over max_pending, the
// connection pending longest is reset; over max_connections, the same, or c itself
// when none is pending. Shedding the oldest rather than refusing the newest is what
// lets a legitimate client in while slow ones fill the cap: its connection is the
// youngest and leaves the pending state within a round trip, a slow one never does
// (and is reset only when room is needed, so below the caps nothing changes). It
// reports whether c may go on.
func (t *TCP) enter(c net.Conn, s *slot) bool {
	t.mu.Lock()
	open := t.open.Add(1)
	maxOpen, maxPending := t.maxOpen.Load(), t.maxPending.Load()
	var shed *slot
	switch {
	case maxPending > 0 && int64(t.queue.Len()) >= maxPending,
		maxOpen > 0 && open > maxOpen && t.queue.Len() > 0:
		shed = t.queue.Remove(t.queue.Front()).(*slot)
		shed.elem, shed.shed = nil, true
		t.pending.Add(-1)
		if maxOpen > 0 && open > maxOpen {
			t.refusedOpen.Add(1)
		} else {
			t.refusedPending.Add(1)
		}
	case maxOpen > 0 && open > maxOpen:
		t.open.Add(-1)
		t.refusedOpen.Add(1)
		t.mu.Unlock()
		return false
	}
	s.elem = t.queue.PushBack(s)
	t.pending.Add(1)
	t.mu.Unlock()
	if shed != nil {
		shed.end()       // a handshake waiting for the gate stops
		reset(shed.conn) // the server then reports it closed: Release gives it back
		t.chargeShed(shed)
	}
	return true
}

// leave takes s out of the pending queue, if it is there, and reports whether the
// pending cap had shed it.
func (t *TCP) leave(s *slot) (shed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.elem != nil {
		t.queue.Remove(s.elem)
		s.elem = nil
		t.pending.Add(-1)
	}
	return s.shed
}

// slotKey is the context key of a connection's slot (ConnContext).
type slotKey struct{}

// ConnContext puts the slot of c, a connection Accept returned (unwrapped of TLS and
// the like), in its context ctx, for Served.
func (t *TCP) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if v, ok := t.conns.Load(c); ok {
		return context.WithValue(ctx, slotKey{}, v.(*slot))
	}
	return ctx
}

// Served notes that a request of the connection whose context ctx derives from
// (ConnContext) reached the chain: the connection is no longer pending.
func (t *TCP) Served(ctx context.Context) {
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		t.served(s)
	}
}

// ServedConn is Served for a connection Accept returned (unwrapped), for a server
// without the chain (http_listen's, once a request has begun).
func (t *TCP) ServedConn(c net.Conn) {
	if v, ok := t.conns.Load(c); ok {
		t.served(v.(*slot))
	}
}

func (t *TCP) served(s *slot) {
	if s.pending.CompareAndSwap(true, false) {
		t.leave(s)
	}
}

// Caps returns the caps limits sets, for SetCaps: zero sized from the machine
// (MachineCaps), -1 not capped.
func Caps(l config.LimitsConfig) (open, pending int) {
	mo, mp := MachineCaps()
	return capOf(l.MaxConnections, mo), capOf(l.MaxPendingConnections, mp)
}

// capOf reads a limits cap v: 0 is machine's size, -1 not capped (0), else v.
func capOf(v, machine int) int {
	switch v {
	case 0:
		return machine
	case -1:
		return 0
	}
	return v
}

// ErrOverload refuses a QUIC connection while the edge sheds new work; quic-go
// answers it with CONNECTION_REFUSED.
var ErrOverload = errors.New("admission: the edge sheds new work (overload)")

// OverloadCaps returns limits.max_inflight_requests and max_goroutines as the edge
// applies them: zero sized from the machine — 1 024 requests in flight and 50 000
// goroutines per core of GOMAXPROCS — and -1 (not capped) as 0.
func OverloadCaps(l config.LimitsConfig) (inflight, goroutines int) {
	procs := runtime.GOMAXPROCS(0)
	return capOf(l.MaxInflightRequests, 1024*procs), capOf(l.MaxGoroutines, 50000*procs)
}

// Counts returns the open connections and the pending ones among them.
func (t *TCP) Counts() (open, pending int64) { return t.open.Load(), t.pending.Load() }
