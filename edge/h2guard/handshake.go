package h2guard

import (
	"context"
	"sync"
	"time"
)

// The handshake gate. A TLS handshake costs the server ~0.5 ms of CPU (key exchange,
// signature); a burst of them — 1 000 slow readers reconnecting at once after their
// write timeout, each source within its connection budget — leaves every request of
// the established connections queued behind them in Go's run queue: the legitimate
// p99 went from 20 ms to 0.3–1 s for the two seconds each burst lasted (README,
// Attacks). Accept waits while Config.Handshakes handshakes are in progress, so the
// rest of a burst waits in the kernel's accept queue, costing nothing, instead of
// being accepted and run at once. A slot is given back when the handshake ends, or
// handshakeHold after Accept whatever happens, so that a client that stalls its
// handshake holds a slot 20 ms, not the handshake timeout.

// handshakeHold is the longest one connection holds a handshake slot.
const handshakeHold = 20 * time.Millisecond

// gate bounds the handshakes in progress; nil: not bounded.
type gate chan struct{}

// enter waits for a slot, or until done is closed (false).
func (g gate) enter(done <-chan struct{}) bool {
	select {
	case g <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// ticket is one connection's slot, given back once.
type ticket struct {
	once  sync.Once
	g     gate
	timer *time.Timer
}

func (g gate) ticket() *ticket {
	t := &ticket{g: g}
	t.timer = time.AfterFunc(handshakeHold, t.give)
	return t
}

// give gives the slot back, once.
func (t *ticket) give() { t.once.Do(func() { <-t.g }) }

// release gives the slot back at the end of the handshake (from the connection's
// goroutine, after Accept set the timer).
func (t *ticket) release() {
	t.timer.Stop()
	t.give()
}

// HandshakeContext runs the TLS handshake and gives the connection's handshake slot
// back. net/http calls it before anything else on the connection.
func (c *Conn) HandshakeContext(ctx context.Context) error {
	err := c.Conn.HandshakeContext(ctx)
	if c.ticket != nil {
		c.ticket.release()
	}
	return err
}
