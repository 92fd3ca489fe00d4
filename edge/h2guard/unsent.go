package h2guard

import "net"

// NotSentLimit is the most the kernel may hold unsent for one TCP connection accepted
// through UnsentLimited: enough to keep a fast client's pipe full between two wake-ups
// of the writer, little enough that the write timeout sees a slow reader stall before
// h3edge has encrypted megabytes for it.
const NotSentLimit = 128 << 10

// UnsentLimited returns a listener that caps each accepted TCP connection's unsent
// kernel data at NotSentLimit (TCP_NOTSENT_LOWAT, on Linux; elsewhere nothing), before
// the connection reaches TLS and the HTTP server. It wraps the listener only: the
// connections themselves go on unwrapped.
func UnsentLimited(ln net.Listener) net.Listener { return unsentLimited{ln} }

type unsentLimited struct{ net.Listener }

func (l unsentLimited) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		limitUnsent(c)
	}
	return c, err
}
