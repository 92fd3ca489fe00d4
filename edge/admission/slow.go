package admission

import (
	"net/netip"
	"time"
)

// Connections that end without making progress. A connection the pending cap sheds,
// or one that closes still pending at least the header timeout after it was accepted
// (the header read timeout ended it, or its client kept it open unused that long),
// brought no request: its source is charged one rejection (SetCharge; the edge's
// penalty box), as the write timeout and the body read timeout charge theirs. A
// slowloris source spends its connection budget (ip.connections: 20 a second) on
// connections that end so, and is banned once more than abuse.rejections (50) of them
// ended within abuse.within (10 s); then it is reset at accept, before any TLS work,
// instead of handshaking again and again. A legitimate client is charged only for a
// connection that sent no request at all: one a browser opened ahead of need and left
// unused (at most a few to a host), or one shed while its handshake waited under a
// flood of pending connections, once per attempt; 51 within 10 s is past what one
// client opens, and ip.max_connections (64) caps what a source holds at once.

// Charge reasons, for the log.
const (
	ReasonShed = "pending connection shed"
	ReasonIdle = "no request within the header timeout"
)

// SetCharge makes t charge the source of a connection that ends without bringing a
// request — shed by the pending cap, or closed still pending headerTimeout or more
// after accept — through charge, once per connection. Call it before the listener
// serves; nil charges nothing.
func (t *TCP) SetCharge(headerTimeout time.Duration, charge func(addr netip.Addr, reason string)) {
	t.headerTimeout, t.charge = headerTimeout, charge
}

// chargeShed charges the source of a connection the pending cap shed.
func (t *TCP) chargeShed(s *slot) {
	if t.charge != nil {
		t.charge(s.addr, ReasonShed)
	}
}

// chargeIdle charges the source of s, a connection closing while still pending and
// not shed, if it was open at least the header timeout.
func (t *TCP) chargeIdle(s *slot) {
	if t.charge != nil && t.headerTimeout > 0 && time.Since(s.since) >= t.headerTimeout {
		t.charge(s.addr, ReasonIdle)
	}
}
