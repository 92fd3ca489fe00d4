package edge

import (
	"net/http"
	"strings"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/edge/tunnel"
	"github.com/h3edge/h3edge/edge/xconnect"
)

// net/http's HTTP/2 server has read GODEBUG by now (edge imports net/http): processes
// the edge starts get the environment it started with.
func init() { xconnect.Restore() }

// extendedConnect turns a WebSocket that comes as an extended CONNECT — RFC 8441 on
// HTTP/2, RFC 9220 on HTTP/3 — into the HTTP/1.1 Upgrade request the rest of the chain
// and the proxy know: routes and policies see a GET with Upgrade: websocket, a
// concurrent-requests policy holds its unit until the tunnel ends, max_duration ends
// it, and the upstream gets an HTTP/1.1 handshake with a key of the edge's own. Each
// write to the client's stream must end within limits.write_timeout: a client that
// stops reading holds a stream that flow control stalls, which no TCP write shows. Other
// extended CONNECT protocols (webtransport, connect-udp…) get 501, before any policy:
// the proxy would forward them as a plain CONNECT, which the upstream refuses.
//
// HTTP/3 advertises extended CONNECT on every connection (quic-go v0.65 cannot turn it
// off); HTTP/2 does through package xconnect.
func (s *Server) extendedConnect(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		if r.Method != http.MethodConnect {
			next(w, r, now)
			return
		}
		protocol := ""
		switch {
		case r.ProtoMajor == 3 && r.Proto != "HTTP/3.0":
			protocol = r.Proto // quic-go puts :protocol there
		case r.Header[":protocol"] != nil:
			protocol = r.Header.Get(":protocol")
		default:
			next(w, r, now) // a plain CONNECT: the proxy refuses it as before
			return
		}
		if !strings.EqualFold(protocol, "websocket") {
			answer.Problem(w, r, http.StatusNotImplemented, "Not Implemented",
				"extended CONNECT carries WebSocket only")
			return
		}
		up, b := tunnel.New(w, r, maxHeaderBytes, s.config().Limits.WriteTimeout, badHandshake)
		next(b, up, now)
		b.Close()
	}
}

// badHandshake answers an extended CONNECT whose upstream answered the WebSocket
// handshake 2xx without switching protocols: no WebSocket server is there.
func badHandshake(w http.ResponseWriter, r *http.Request) {
	answer.Problem(w, r, http.StatusBadGateway, "Bad Gateway",
		"the upstream answered the WebSocket handshake without switching protocols")
}
