package edge

import (
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/h3edge/h3edge/edge/plainhttp"
)

// listenPlain binds http_listen, if set (Listen): package plainhttp answers ACME
// HTTP-01 validations there and redirects the rest to https.
func (s *Server) listenPlain() error {
	addr := s.config().HTTPListen
	if addr == "" || s.plain != nil { // a second Listen fails on its own
		return nil
	}
	c := plainhttp.Config{
		HTTPSPort: func() int { return s.Addr().Port },
		Admit:     s.tcp.Listener, // the same per-source budget and ban list as the public port's
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateActive { // a request has begun: no longer pending
				s.tcp.ServedConn(c)
			}
			s.connState(c, st) // gives the source's connection slot back
		},
		HeaderTimeout:  s.headerTimeout(),
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		Logger:         s.log,
	}
	if s.acme != nil {
		c.Challenge = s.acme.HandleHTTPChallenge
	}
	p, err := plainhttp.Listen(addr, c)
	if err != nil {
		return fmt.Errorf("edge: http_listen: %w", err)
	}
	s.plain = p
	return nil
}

// plainAddr is http_listen's bound address, nil without it.
func (s *Server) plainAddr() *net.TCPAddr {
	if s.plain == nil {
		return nil
	}
	return s.plain.Addr()
}

// servePlain serves http_listen until the server stops.
func (s *Server) servePlain() {
	if s.plain == nil {
		return
	}
	go func() {
		if err := s.plain.Serve(); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http_listen failed", "error", err)
		}
	}()
}

// closeACME closes http_listen and stops the ACME manager (closeSockets, before the
// Redis connection that storage: redis uses is closed).
func (s *Server) closeACME() error {
	var err error
	if s.plain != nil {
		err = s.plain.Close()
	}
	if s.acme != nil {
		s.acme.Close()
	}
	return err
}
