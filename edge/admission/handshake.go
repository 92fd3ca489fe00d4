package admission

import (
	"crypto/tls"
	"errors"
	"runtime"
	"time"
)

// The handshake gate. A TLS handshake costs the server a few hundred µs of CPU
// (X25519MLKEM768, the certificate's signature) between the ClientHello and the end
// of its first flight, and net/http runs each at once: a burst of a thousand — slow
// readers reconnecting together after their write timeout, slowloris replacing what
// the pending cap sheds — put every request of the established connections behind
// them in Go's run queue (0.1–1 s for the seconds a burst lasted). GateHandshakes
// bounds the handshakes in that CPU part at once. The others wait for a slot, not
// runnable, as what they are: pending connections, which the pending cap may shed —
// a shed connection stops waiting and costs nothing more. (A gate at accept instead,
// tried first, hid the waiting connections from the pending cap: each accepted one
// had its full handshake, then was shed as the oldest pending.) A handshake that gets
// a slot yields once before its CPU part, so it queues behind the requests already
// runnable rather than ahead of them. It gives the slot back as long after its first
// flight is written (tls.Config.VerifyConnection, which a server that asks no client
// certificate calls then) as it took to get there, when the connection closes, or
// handshakeHold after it took it, whichever comes first: a client whose ClientHello
// is answered with a HelloRetryRequest keeps the handshake waiting inside its CPU
// part. The wait after the flight leaves half the CPU to the rest while a burst lasts:
// with handshakes always runnable, Go's scheduler polls the network for the requests
// of the established connections only every 10 ms (runtime/proc.go: findRunnable polls
// when it finds no goroutine to run, sysmon when nobody has for 10 ms): slow-read's legitimate p99 2.00–2.10× the control's without it, 1.57–1.74×
// with it (two pairs side by side).

// handshakeHold is the longest one handshake keeps its slot.
const handshakeHold = 10 * time.Millisecond

// errGateEnded fails the handshake of a connection shed, kicked or closed while it
// waited for the gate.
var errGateEnded = errors.New("admission: the connection ended while its handshake waited")

// GateHandshakes makes the server configuration c, of the TLS listener over t's
// Listener, let at most n handshakes at once do their CPU part; n ≤ 0: no gate. It
// sets c.GetConfigForClient (and a VerifyConnection of its own on the configuration
// each handshake then uses, calling c's); call it before c is in use.
func (t *TCP) GateHandshakes(c *tls.Config, n int) {
	if n <= 0 {
		return
	}
	t.slots = make(chan struct{}, n)
	if t.hold == 0 {
		t.hold = handshakeHold
	}
	verify := c.VerifyConnection
	c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		v, ok := t.conns.Load(hello.Conn)
		if !ok { // not a connection Accept returned
			return nil, nil
		}
		s := v.(*slot)
		if err := t.enterGate(s); err != nil {
			return nil, err
		}
		cc := c.Clone()
		cc.GetConfigForClient = nil
		cc.VerifyConnection = func(cs tls.ConnectionState) error {
			// As long again before the slot goes to the next: handshakes take at most
			// half the CPU while a burst lasts.
			time.AfterFunc(time.Since(s.gateAt), func() { t.ungate(s) })
			if verify != nil {
				return verify(cs)
			}
			return nil
		}
		return cc, nil
	}
}

// enterGate waits for a handshake slot for s, or until s ends (errGateEnded).
func (t *TCP) enterGate(s *slot) error {
	t.waiting.Add(1)
	got := false
	select {
	case t.slots <- struct{}{}:
		got = true
	case <-s.ended:
	}
	t.waiting.Add(-1)
	if got {
		s.gate.Store(true)
		s.gateAt = time.Now()
	}
	if s.ending.Load() { // ended meanwhile: select may pick either when both are ready
		t.ungate(s)
		return errGateEnded
	}
	time.AfterFunc(t.hold, func() { t.ungate(s) })
	runtime.Gosched() // behind the requests already runnable
	return nil
}

// ungate gives s's handshake slot back, if it holds one.
func (t *TCP) ungate(s *slot) {
	if s.gate.CompareAndSwap(true, false) {
		<-t.slots
	}
}

// Handshakes returns how many handshakes hold a slot of the gate now, and how many
// wait for one.
func (t *TCP) Handshakes() (holding, waiting int) { return len(t.slots), int(t.waiting.Load()) }
