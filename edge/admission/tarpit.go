package admission

import (
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// The tarpit. A connection from a banned source is not reset at accept but held,
// unread and unanswered, for tarpitHold, then reset; when the tarpit is full the one
// held longest is reset to make room. A reset answers at once, and an attacker
// redials at once: under slowloris from 50 banned sources, accepting and resetting
// took two thirds of h3edge's CPU (17 000 connections a second, and their garbage in
// its heap). Held, a connection costs one accept and a socket for a few seconds — no
// goroutine, no read, no TLS — while its client waits for its own timeout, as a
// banned source's QUIC handshake does for its dropped datagrams. (A socket filter on
// the TCP listener, which would drop the SYNs as the UDP socket's drops datagrams,
// is refused by Linux: EOPNOTSUPP.) The connection counts against no cap: it is
// not served.

// tarpitHold is how long a banned source's connection is held before it is reset.
const tarpitHold = 10 * time.Second

// tarpitPerCore sizes the tarpit, per core of GOMAXPROCS, and at most an eighth of
// the file descriptors the process may open (tarpitSize). A slowloris attacker's
// client gives up on a handshake after a few seconds and redials: the tarpit must hold
// what it opens meanwhile, or the evictions make the redials it was meant to stop (a
// tarpit of 1 024 against 50 sources × 60 connections left the churn as it was).
const tarpitPerCore = 4096

// tarpitSize returns how many connections the tarpit holds at most.
func tarpitSize() int {
	n := tarpitPerCore * runtime.GOMAXPROCS(0)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
		n = min(n, int(min(rl.Cur, 1<<30)/8))
	}
	return n
}

// tarpit holds connections. Its zero value holds none (a reset at once).
type tarpit struct {
	hold time.Duration
	max  int

	mu      sync.Mutex
	q       []tarpitted // oldest first
	running bool        // run is draining q
}

type tarpitted struct {
	c     net.Conn
	until time.Time
}

// put holds c, resetting the connection held longest if the tarpit is full; with no
// room at all, c is reset now.
func (p *tarpit) put(c net.Conn) {
	if p.max <= 0 {
		reset(c)
		return
	}
	p.mu.Lock()
	var evict net.Conn
	if len(p.q) >= p.max {
		evict = p.q[0].c
		p.q[0] = tarpitted{}
		p.q = p.q[1:]
	}
	p.q = append(p.q, tarpitted{c, time.Now().Add(p.hold)})
	start := !p.running
	p.running = true
	p.mu.Unlock()
	if evict != nil {
		reset(evict)
	}
	if start {
		go p.run()
	}
}

// run resets each held connection once its hold has passed, oldest first, and
// returns once none is held.
func (p *tarpit) run() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		p.mu.Lock()
		if len(p.q) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		head := p.q[0]
		p.mu.Unlock()
		if d := time.Until(head.until); d > 0 {
			timer.Reset(d)
			<-timer.C
		}
		p.mu.Lock()
		if len(p.q) > 0 && p.q[0].c == head.c { // not evicted meanwhile
			p.q[0] = tarpitted{}
			p.q = p.q[1:]
			p.mu.Unlock()
			reset(head.c)
			continue
		}
		p.mu.Unlock()
	}
}

// Tarpitted returns how many connections of banned sources are held now.
func (t *TCP) Tarpitted() int {
	t.tarpit.mu.Lock()
	defer t.tarpit.mu.Unlock()
	return len(t.tarpit.q)
}
