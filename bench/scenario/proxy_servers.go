package scenario

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/demo"
)

// ServeOrigin runs the proxy scenario's origin: h3edge's demo origin (package demo)
// over plain HTTP/1.1 with keep-alive, as the Go services behind an edge are. Once the
// socket is bound it writes "origin serving listen=ADDR" to logw and serves until ctx
// ends.
func ServeOrigin(ctx context.Context, addr string, logw io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bench: origin: %w", err)
	}
	srv := &http.Server{Handler: demo.New(demo.Config{}), ReadHeaderTimeout: bareHeaderTimeout, IdleTimeout: bareIdleTimeout}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(logw, "origin serving listen=%s\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	srv.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("bench: origin: %w", err)
	}
	return nil
}

// startOrigin starts the origin (Options.OriginCommand, or this executable's hidden
// "serve-origin -listen ADDR") on a free loopback port, pinned with the servers.
func (e *env) startOrigin(ctx context.Context) (*process, netip.AddrPort, error) {
	port, err := testkit.FreePort()
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	argv, err := helperCommand(e.opt.OriginCommand, "serve-origin", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	p, _, err := startProcess(ctx, "origin", e.wrap(argv), nil, originReady.MatchString, 15*time.Second)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	e.procs = append(e.procs, p)
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))
	e.logf("started origin (pid %d) on %v", p.pid(), addr)
	return p, addr, nil
}

// referenceTLS writes a self-signed certificate for the reference proxies: cert.pem,
// key.pem, and both in one file for HAProxy; it returns the SPKI pin.
func (e *env) referenceTLS() (pin string, err error) {
	c, pin, err := bareCertificate()
	if err != nil {
		return "", err
	}
	key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return "", err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Leaf.Raw})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})
	for name, b := range map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM, "both.pem": append(certPEM, keyPEM...)} {
		if err := os.WriteFile(filepath.Join(e.dir, name), b, 0o600); err != nil {
			return "", err
		}
	}
	return pin, nil
}

// nginxConfig is nginx as the issue measured it: one process, TLS with HTTP/2 on the
// listener, keep-alive to the origin, no access log.
const nginxConfig = `daemon off;
master_process off;
worker_processes 1;
error_log stderr error;
pid %[1]s/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  keepalive_requests 10000000;
  upstream origin { server %[2]s; keepalive 64; keepalive_requests 10000000; }
  server {
    listen %[3]s ssl http2;
    ssl_certificate %[1]s/cert.pem;
    ssl_certificate_key %[1]s/key.pem;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto https;
    }
  }
}
`

// haproxyConfig is HAProxy alike: one thread, TLS with HTTP/2 by ALPN, connection reuse
// towards the origin.
const haproxyConfig = `global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend fe
  bind %[3]s ssl crt %[1]s/both.pem alpn h2,http/1.1
  option forwardfor
  http-request set-header X-Forwarded-Proto https
  default_backend be
backend be
  server o1 %[2]s
`

// startReference starts nginx or HAProxy (bin) with conf on a free loopback port, in
// front of origin; ok is false when bin is not installed.
func (e *env) startReference(ctx context.Context, name string, origin netip.AddrPort, pin string) (s *server, ok bool, err error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		for _, d := range []string{"/usr/sbin/", "/usr/local/sbin/"} {
			if _, err := os.Stat(d + name); err == nil {
				bin = d + name
			}
		}
		if bin == "" {
			return nil, false, nil
		}
	}
	port, err := testkit.FreePort()
	if err != nil {
		return nil, true, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	dir := filepath.Join(e.dir, name)
	for _, d := range []string{dir, filepath.Join(e.dir, "body"), filepath.Join(e.dir, "proxy")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, true, err
		}
	}
	conf := filepath.Join(dir, name+".conf")
	var argv []string
	switch name {
	case "nginx":
		err = os.WriteFile(conf, fmt.Appendf(nil, nginxConfig, e.dir, origin, listen), 0o644)
		argv = []string{bin, "-p", dir, "-c", conf}
	default:
		err = os.WriteFile(conf, fmt.Appendf(nil, haproxyConfig, e.dir, origin, listen), 0o644)
		argv = []string{bin, "-db", "-f", conf}
	}
	if err != nil {
		return nil, true, err
	}
	// Neither prints a line when ready: a shell says it is starting, exec keeps the
	// pid, and the port is polled until it accepts.
	sh := []string{"sh", "-c", `echo starting; exec "$0" "$@"`}
	p, _, err := startProcess(ctx, name, e.wrap(append(sh, argv...)), nil, func(l string) bool { return l == "starting" }, 15*time.Second)
	if err != nil {
		return nil, true, err
	}
	e.procs = append(e.procs, p)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if err := p.alive(); err != nil {
			return nil, true, err
		}
		if time.Now().After(deadline) {
			return nil, true, fmt.Errorf("bench: %s does not accept on %s", name, listen)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return nil, true, ctx.Err()
		}
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))
	e.logf("started %s (pid %d) on %v", name, p.pid(), addr)
	return &server{process: p, addr: addr, pin: pin}, true, nil
}
