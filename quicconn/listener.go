package quicconn

import (
	"context"
	"errors"
	"net"

	"github.com/quic-go/quic-go"
)

// QUICListener is what http3.Server.ServeListener serves: *quic.EarlyListener,
// *quic.Listener, and Listener.
type QUICListener interface {
	Accept(context.Context) (*quic.Conn, error)
	Addr() net.Addr
	Close() error
}

// Listener hands out the connections of a QUIC listener after Guard.Track has
// registered them, and skips those Track closed because their source is banned.
type Listener struct {
	ln QUICListener
	g  *Guard
}

// Listener wraps ln, a listener of a Transport whose ConnContext is g.ConnContext, so
// that Kick reaches its connections: http3Server.ServeListener(g.Listener(ln)).
func (g *Guard) Listener(ln QUICListener) *Listener { return &Listener{ln: ln, g: g} }

// Accept returns the next connection of a source that is not banned.
func (l *Listener) Accept(ctx context.Context) (*quic.Conn, error) {
	for {
		c, err := l.ln.Accept(ctx)
		if err != nil {
			return nil, err
		}
		if err := l.g.Track(c); errors.Is(err, ErrBanned) {
			continue
		}
		return c, nil
	}
}

// Addr is the wrapped listener's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close closes the wrapped listener.
func (l *Listener) Close() error { return l.ln.Close() }
