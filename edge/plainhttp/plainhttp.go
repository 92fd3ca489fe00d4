// Package plainhttp is the edge's http_listen listener: plain HTTP that answers ACME
// HTTP-01 validations and redirects every other request to the same host and path on
// https with 308 (which, unlike 301, keeps the method and body). It holds only
// redirects and validations, which a client simply repeats, so it closes at once even
// on a graceful shutdown.
package plainhttp

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Config is what a Server needs from the edge.
type Config struct {
	// Challenge answers an ACME HTTP-01 validation and reports whether r was one. If
	// nil, every request is redirected.
	Challenge func(w http.ResponseWriter, r *http.Request) bool
	// HTTPSPort returns the port redirects go to, called per request (the edge's port
	// is known once it listens); 443 is left out of the URL. Required.
	HTTPSPort func() int
	// Admit wraps the listener, so that its connections pass the per-source budgets
	// and ban list of the public port. If nil, every connection is accepted.
	Admit func(net.Listener) net.Listener
	// ConnState is the http.Server's (the edge gives the source's connection slot back).
	ConnState func(net.Conn, http.ConnState)
	// HeaderTimeout bounds reading a request's header section; IdleTimeout an idle
	// connection; MaxHeaderBytes the header section. Zero: net/http's defaults.
	HeaderTimeout, IdleTimeout time.Duration
	MaxHeaderBytes             int
	// Logger receives net/http's own errors at debug level. If nil, slog.Default().
	Logger *slog.Logger
}

// Server is a bound http_listen socket. Make it with Listen, run it with Serve, stop
// it with Close.
type Server struct {
	c   Config
	ln  net.Listener
	srv *http.Server
}

// Listen binds addr; its error is net.Listen's ("listen tcp ADDR: …").
func Listen(addr string, c Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{c: c, ln: ln}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: c.HeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ConnState:         c.ConnState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() *net.TCPAddr { return s.ln.Addr().(*net.TCPAddr) }

// Serve serves until Close, then returns http.ErrServerClosed.
func (s *Server) Serve() error {
	ln := s.ln
	if s.c.Admit != nil {
		ln = s.c.Admit(ln)
	}
	return s.srv.Serve(ln)
}

// Close closes the socket and every connection at once.
func (s *Server) Close() error {
	errSrv := s.srv.Close() // first, so that Serve returns http.ErrServerClosed
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return errors.Join(errSrv, err)
}

// serveHTTP answers an ACME HTTP-01 validation, or redirects to https.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if s.c.Challenge != nil && s.c.Challenge(w, r) {
		return
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" {
		http.Error(w, "a Host header is needed to redirect to https", http.StatusBadRequest)
		return
	}
	if p := s.c.HTTPSPort(); p != 443 {
		host = net.JoinHostPort(host, strconv.Itoa(p))
	} else if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		host = "[" + host + "]"
	}
	w.Header().Set("Connection", "close") // the client's next request goes to https
	http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
}
