package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// plainHTTP is the http_listen listener: plain HTTP that answers ACME HTTP-01
// validations and redirects everything else to https with 308.
type plainHTTP struct {
	ln  net.Listener
	srv *http.Server
}

// listenPlain binds http_listen, if set (Listen).
func (s *Server) listenPlain() error {
	addr := s.config().HTTPListen
	if addr == "" || s.plain != nil { // a second Listen fails on its own
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("edge: http_listen: %w", err)
	}
	s.plain = &plainHTTP{ln: ln, srv: &http.Server{
		Handler:           http.HandlerFunc(s.servePlainHTTP),
		ReadHeaderTimeout: s.headerTimeout(),
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         s.connState, // gives the source's connection slot back
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}}
	return nil
}

// plainAddr is http_listen's bound address, nil without it.
func (s *Server) plainAddr() *net.TCPAddr {
	if s.plain == nil {
		return nil
	}
	return s.plain.ln.Addr().(*net.TCPAddr)
}

// servePlain serves http_listen until the server stops. Its connections pass the same
// per-source budget and ban list as the public port's (admission.TCP).
func (s *Server) servePlain() {
	if s.plain == nil {
		return
	}
	go func() {
		err := s.plain.srv.Serve(s.tcp.Listener(s.plain.ln))
		if !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http_listen failed", "error", err)
		}
	}()
}

// servePlainHTTP answers an ACME HTTP-01 validation, or redirects to the same host and
// path on https with 308 (which, unlike 301, keeps the method and body).
func (s *Server) servePlainHTTP(w http.ResponseWriter, r *http.Request) {
	if s.acme != nil && s.acme.HandleHTTPChallenge(w, r) {
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
	if p := s.httpsPort(); p != "" {
		host = net.JoinHostPort(host, p)
	} else if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		host = "[" + host + "]"
	}
	w.Header().Set("Connection", "close") // the client's next request goes to https
	http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
}

// closeACME closes http_listen and stops the ACME manager (closeSockets, before the
// Redis connection that storage: redis uses is closed). http_listen closes at once
// even on a graceful shutdown: it holds only redirects and validations, which a client
// simply repeats.
func (s *Server) closeACME() error {
	var err error
	if s.plain != nil {
		err = errors.Join(s.plain.srv.Close(), ignoreClosed(s.plain.ln.Close()))
	}
	if s.acme != nil {
		s.acme.Close()
	}
	return err
}
