package h2guard

import (
	"context"
	"net"
	"net/http"
)

// connKey is the context key of an HTTP/2 connection's guard (ConnContext).
type connKey struct{}

// Completions counts, for each guarded connection, the HTTP/2 requests handed to next
// (seen: the counterweight of Config.MaxUnseen), and those completed — whose handler
// returned while the stream was still open, the counterweight of the resets the abuse
// guard counts. It needs ConnContext in the server's ConnContext.
func Completions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, _ := r.Context().Value(connKey{}).(*Conn)
		if r.ProtoMajor != 2 || g == nil {
			next.ServeHTTP(w, r)
			return
		}
		g.abuse.seen.Add(1)
		next.ServeHTTP(w, r)
		if r.Context().Err() == nil {
			g.abuse.completed.Add(1)
		}
	})
}

// ConnContext puts c's guard, when c is a *Conn, in the connection's context ctx, for
// Completions: call it from http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if g, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, g)
	}
	return ctx
}
