package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// Server is the admin listener: plain HTTP on its own address, never the public one.
// Like net/http, Serve returns http.ErrServerClosed after Shutdown or Close. A nil
// *Server (admin.listen: off) does nothing.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// ErrExposed refuses an admin listener reachable from other machines without a token.
// config.Validate reports it first; Listen is the last guard.
var ErrExposed = errors.New("admin: listener is not on a loopback address and admin.token is empty")

// Listen binds the admin listener of c for h. With c.Listen "off" it returns nil and
// no error. log receives net/http's connection errors, at debug level; if nil,
// slog.Default() is used.
func Listen(c config.AdminConfig, h http.Handler, log *slog.Logger) (*Server, error) {
	if c.Listen == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("edge: admin listen %s: %w", c.Listen, err)
	}
	if ta, ok := ln.Addr().(*net.TCPAddr); c.Token == "" && (!ok || !ta.IP.IsLoopback()) {
		ln.Close()
		return nil, ErrExposed
	}
	if log == nil {
		log = slog.Default()
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return &Server{ln: ln, srv: srv}, nil
}

// Addr is the bound address; nil when off.
func (s *Server) Addr() net.Addr {
	if s == nil {
		return nil
	}
	return s.ln.Addr()
}

// Serve serves until Shutdown or Close, then returns http.ErrServerClosed.
func (s *Server) Serve() error {
	if s == nil {
		return http.ErrServerClosed
	}
	return s.srv.Serve(s.ln)
}

// Shutdown stops accepting and waits for the admin requests in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	s.ln.Close() // when Serve never ran
	return err
}

// Close stops at once.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	err := s.srv.Close()
	s.ln.Close()
	return err
}
