// Package edge is the h3edge server, run from a config.Config: listeners for HTTP/3,
// HTTP/2 and HTTP/1.1 on one port, the middleware chain that protects the origin, the
// proxy to it, and graceful shutdown. Only cmd/h3edge imports it.
package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/certs"
	"github.com/h3edge/h3edge/certs/acme"
	"github.com/h3edge/h3edge/edge/accesslog"
	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/admission"
	"github.com/h3edge/h3edge/edge/bans"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/enforce"
	"github.com/h3edge/h3edge/edge/h1serve"
	"github.com/h3edge/h3edge/edge/h2guard"
	"github.com/h3edge/h3edge/edge/h3serve"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/logsample"
	"github.com/h3edge/h3edge/edge/metrics"
	"github.com/h3edge/h3edge/edge/overload"
	"github.com/h3edge/h3edge/edge/plainhttp"
	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/edge/xconnect"
	"github.com/h3edge/h3edge/limiter"
	"github.com/h3edge/h3edge/limiter/penalty"
	"github.com/h3edge/h3edge/limiter/redisstore"
	"github.com/h3edge/h3edge/quicconn"
)

// Limits of the public listeners that are not configurable: they protect the edge itself.
const (
	// maxHeaderBytes caps a request's header section on every protocol; larger requests
	// get 431. API requests need far less; QPACK and HPACK blow-ups need it bounded.
	maxHeaderBytes = 64 << 10
	// parseMaxHeaderBytes is what net/http and quic-go read before giving up. It is
	// larger than maxHeaderBytes because their own answers to a header section over
	// their limit are not ours: Go's HTTP/2 server answers with a connection error (its
	// CONTINUATION-flood defence), quic-go with a bare 431 that no handler sees (no
	// problem document, not counted). Reading up to 256 KiB lets headerLimit answer a
	// counted 431 problem document for sections in between.
	parseMaxHeaderBytes = 256 << 10
	// maxHeaderFields caps a request's header field lines on every protocol, as Go's
	// servers do by default (http.DefaultMaxHeaderValueCount); more get 431.
	maxHeaderFields = 500
	// parseMaxHeaderFields is the count past which Go's HTTP/2 server and h1serve give
	// their own bare 431; above maxHeaderFields for the reason parseMaxHeaderBytes is.
	// quic-go counts none: parseMaxHeaderBytes bounds an HTTP/3 section.
	parseMaxHeaderFields = 4 * maxHeaderFields
	// readHeaderTimeout bounds slowloris: a request whose header section is not complete
	// this long after it began is ended, on every protocol (package h2guard on HTTP/2).
	readHeaderTimeout = 10 * time.Second
	// handshakesPerCore bounds the TLS handshakes in their CPU part at once, per core
	// (package admission's handshake gate): ~2 ms of handshake work ahead of a request.
	handshakesPerCore = 4
	// idleTimeout closes idle TCP and QUIC connections.
	idleTimeout = 120 * time.Second
)

// Server is one running edge. Create it with New, bind with Listen, run with Serve, stop
// with Shutdown or Close. Its methods are safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger // with component=edge
	// baseLog is Options.Logger as given, for the packages that name their own component.
	baseLog *slog.Logger

	// What a configuration reload replaces, each swapped atomically.
	cfg    atomic.Pointer[config.Config]
	certs  atomic.Pointer[certs.Store]
	origin atomic.Pointer[http.Handler]
	// routing is the route table and pools behind origin (nil: the demo origin).
	routing atomic.Pointer[routing]

	handler http.Handler

	// Per-key quota (enforce.go): the compiled policies, the store deciding them, the
	// key hash, the API-key plans and the enforcer deciding with them.
	rules  atomic.Pointer[rules.Set]
	store  *limiter.Local
	global enforce.GlobalStore // nil without redis:
	redis  *redisstore.Store
	bans   *redisstore.BanBus // nil unless bans are shared
	hasher identity.Hasher
	plans  atomic.Pointer[identity.Plans]
	quota  *enforce.Enforcer
	// hashes reads keys.redis_hash: the Redis store, set once in New (nil without
	// redis:) and, unlike redis, never cleared by Close; plansFailing tells that the
	// last read of the hash failed.
	hashes       identity.HashScanner
	plansFailing atomic.Bool

	// guard holds the per-source transport budgets (ip:); tcp admits TCP connections
	// under them and tracks the open ones, so a ban can close them.
	guard *quicconn.Guard
	tcp   *admission.TCP
	// box is the penalty box (abuse:): sources rejected too often are banned and
	// dropped at the cheapest layer.
	box *penalty.Box

	// Operations: metrics on their own registry, the heavy-hitter sketches behind
	// /api/v1/top, and the sampler that keeps rejection logs to a few lines per second.
	registry  *prometheus.Registry
	metrics   *metrics.Metrics
	top       *admin.Top
	rejectLog *logsample.Sampler
	// storeBreaker reports whether the shared store's circuit breaker is open
	// (decisions follow on_store_failure without asking Redis), for
	// store_breaker_open and /readyz. Nil without Redis; set in New.
	storeBreaker func() bool
	// upstreamLog samples the log of failed upstream exchanges (502, 504) likewise.
	upstreamLog *logsample.Sampler
	held        enforce.Held // concurrency units held now, per policy
	// access is the access log (nil: none); accessDropped counts its dropped lines
	// across the logs reloads put in force.
	access        atomic.Pointer[accesslog.Log]
	accessDropped atomic.Uint64

	// inflight counts requests being handled, on all protocols; over maxInflight
	// (limits.max_inflight_requests; 0: not capped) new ones are shed, as they are
	// while shedder says the process is overloaded (shed.go); share keeps each
	// source's share of the cap.
	inflight    atomic.Int64
	maxInflight atomic.Int64
	shedder     *overload.Sampler
	share       *admission.Share
	// altSvcValue is the Alt-Svc field (nil: none), set once the port is known.
	altSvcValue atomic.Pointer[[]string]

	// reloadGen numbers reloads in the order they start; reloaded is the number of the
	// last one committed, so that an older reload finishing later changes nothing.
	reloadGen atomic.Uint64
	reloadMu  sync.Mutex // one reload's commit at a time; guards reloaded
	reloaded  uint64

	// mu guards the sockets and servers, which Listen and Serve set and Shutdown and
	// Close take down, possibly from other goroutines, and the shutdown flag.
	mu       sync.Mutex
	tcpLn    net.Listener
	udpConn  *net.UDPConn
	admin    *admin.Server // nil when admin is off
	quicTr   *quic.Transport
	quicLn   *quic.EarlyListener
	h3s      *h3serve.Server // serves HTTP/3's connections (package h3serve)
	h12      *http.Server
	h1       *h1serve.Server // HTTP/1.1 of h12's TLS connections
	shutdown bool

	// acme obtains and renews tls.acme's certificates (nil without it), plain serves
	// http_listen (nil without it, package plainhttp): acme.go, httplisten.go.
	acme  *acme.Manager
	plain *plainhttp.Server

	done       chan struct{} // closed when the server stops, ending background work
	kernelBans *bans.Kernel  // the kernel's ban filter, kept equal to box
}

// Options carries what the configuration file cannot: the logger and where the
// development certificate is cached.
type Options struct {
	// Logger receives the server's logs. If nil, slog.Default() is used.
	Logger *slog.Logger
	// CertCacheDir is where the development certificate is cached. If empty,
	// certs.DefaultCacheDir() is used.
	CertCacheDir string
	// Load produces the configuration again for a reload (the file with the command
	// line's overrides, defaults applied, validated). If nil, the file the current
	// configuration came from is loaded as is.
	Load func() (*config.Config, error)
	// SetLogFormat switches Logger's output to format ("text" or "json") when a reload
	// changes log_format; it is called once the new configuration is in force. If nil,
	// a reload that changes log_format is refused.
	SetLogFormat func(format string)

	redisPlansEvery time.Duration // tests: keys.redis_hash's period (redisPlansEvery)
	headerTimeout   time.Duration // tests: the header read timeout; zero: readHeaderTimeout
	acme            acmeTuning    // tests: the ACME renewal schedule
}

// headerTimeout is the header read timeout in force (Options.headerTimeout).
func (s *Server) headerTimeout() time.Duration {
	if d := s.opts.headerTimeout; d > 0 {
		return d
	}
	return readHeaderTimeout
}

// New builds a server from a validated configuration. It loads the certificates but opens
// no socket.
func New(cfg *config.Config, opts Options) (*Server, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{opts: opts, log: log.With("component", "edge"), baseLog: log, done: make(chan struct{})}
	if !xconnect.Enabled() {
		s.log.Warn("WebSocket over HTTP/2 is off: GODEBUG sets http2xconnect; browsers open an HTTP/1.1 connection for it instead")
	}
	s.cfg.Store(cfg)
	cs, err := s.newCerts(cfg)
	if err != nil {
		return nil, err
	}
	s.certs.Store(cs)
	if err := s.initQuota(opts); err != nil {
		return nil, err
	}
	if err := s.newPenaltyBox(cfg); err != nil {
		return nil, err
	}
	if s.guard, err = admission.NewGuard(cfg.IP, s.box.Banned); err != nil {
		return nil, err
	}
	s.tcp = admission.NewTCP(s.guard, s.box.Banned)
	s.share = admission.NewShare(s.guard.Sources())
	s.tcp.SetCaps(admission.Caps(cfg.Limits))
	s.shedder = overload.New(overload.Config{})
	s.applyOverload(cfg.Limits)
	s.tcp.SetShedding(s.shedder.Shedding)
	s.tcp.SetCharge(s.headerTimeout(), s.chargeSlow(1))
	s.kernelBans = bans.NewKernel(s.box, s.guard.SetKernelBans, s.log)
	s.registry = metrics.NewRegistry()
	s.top = admin.NewTop()
	if s.metrics, err = s.newMetrics(s.registry); err != nil {
		return nil, err
	}
	s.rejectLog = logsample.New(10)
	s.upstreamLog = logsample.New(10)
	if err := s.initGlobal(cfg); err != nil {
		return nil, err
	}
	s.quota = s.newEnforcer()
	if err := s.initACME(cfg); err != nil {
		return nil, err
	}
	if hash := cfg.Keys.RedisHash; hash != "" {
		// Redis down at start does not stop the edge: keys get default_plan until the
		// watcher reads the hash (it retries every 2 s).
		if p, err := s.redisPlans(hash); err == nil {
			s.plans.Store(p)
		}
	}
	origin, rt, err := s.buildOrigin(cfg, nil)
	if err != nil {
		return nil, err
	}
	s.origin.Store(&origin)
	al, err := s.openAccessLog(cfg)
	if err != nil {
		if rt != nil {
			rt.closeNew(nil) // the pools' health checks would probe on
		}
		return nil, err
	}
	s.access.Store(al)
	s.routing.Store(rt)
	s.handler = s.chain(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*s.origin.Load()).ServeHTTP(w, r)
	}))
	return s, nil
}

// config returns the configuration in force.
func (s *Server) config() *config.Config { return s.cfg.Load() }

// Config returns the configuration in force: the one New was given, or the last one a
// reload applied. It must not be modified.
func (s *Server) Config() *config.Config { return s.config() }

func (s *Server) newCerts(cfg *config.Config) (*certs.Store, error) {
	pairs := make([]certs.Pair, len(cfg.TLS.Certificates))
	for i, p := range cfg.TLS.Certificates {
		pairs[i] = certs.Pair{Cert: p.Cert, Key: p.Key}
	}
	return certs.New(certs.Config{Pairs: pairs, CacheDir: s.opts.CertCacheDir, Logger: s.baseLog})
}

// tlsConfig is a TLS configuration whose certificates come from the store in force, so
// a reload that replaces the store needs no new listener.
func (s *Server) tlsConfig(nextProtos ...string) *tls.Config {
	c := s.certs.Load().ServerConfig(s.withACMEProtocol(nextProtos)...)
	c.GetCertificate = s.getCertificate
	return c
}

// Certs returns the certificate store, for reloads and the start-up summary.
func (s *Server) Certs() *certs.Store { return s.certs.Load() }

// Listen binds the TCP and UDP sockets on the same port. With port 0, the kernel picks
// the TCP port and UDP binds the same number.
func (s *Server) Listen() error {
	listen := s.config().Listen
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("edge: listen %q: %w", listen, err)
	}
	// With port 0 the UDP port the kernel gave TCP may be taken: try a few times.
	for attempt := 0; ; attempt++ {
		tcpLn, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("edge: %w", err) // "listen tcp ADDR: …"
		}
		p := tcpLn.Addr().(*net.TCPAddr).Port
		udpAddr, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			tcpLn.Close()
			return fmt.Errorf("edge: listen udp %s: %w", listen, err)
		}
		udpConn, err := net.ListenUDP("udp", udpAddr)
		if err != nil {
			tcpLn.Close()
			if port == "0" && attempt < 10 {
				continue
			}
			return fmt.Errorf("edge: %w", err) // "listen udp ADDR: …"
		}
		if err := s.listenPlain(); err != nil {
			tcpLn.Close()
			udpConn.Close()
			return err
		}
		adm, err := admin.Listen(s.config().Admin, s.adminHandler(), s.log)
		if err != nil {
			tcpLn.Close()
			udpConn.Close()
			return err
		}
		s.mu.Lock()
		if s.shutdown || s.tcpLn != nil {
			s.mu.Unlock()
			tcpLn.Close()
			udpConn.Close()
			adm.Close()
			if s.shutdown {
				return http.ErrServerClosed
			}
			return errors.New("edge: Listen called twice")
		}
		s.tcpLn, s.udpConn, s.admin = tcpLn, udpConn, adm
		s.mu.Unlock()
		s.setAltSvc()
		return nil
	}
}

// listeners returns the sockets Listen bound and the admin listener (nil before Listen).
func (s *Server) listeners() (net.Listener, *net.UDPConn, *admin.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tcpLn, s.udpConn, s.admin
}

// setAltSvc derives the Alt-Svc value from the configuration and the bound port.
func (s *Server) setAltSvc() {
	cfg := s.config()
	v := cfg.AltSvcValue()
	if cfg.AltSvc == nil {
		v = fmt.Sprintf(`h3=":%d"; ma=86400`, s.Addr().Port)
	}
	var field []string
	if v != "" {
		field = []string{v}
	}
	s.altSvcValue.Store(&field)
}

// AdminAddr returns the admin listener's address, or nil when it is off. Valid after
// Listen.
func (s *Server) AdminAddr() net.Addr {
	_, _, adm := s.listeners()
	return adm.Addr()
}

// Addr returns the bound address (TCP and UDP share the port). Valid after Listen.
func (s *Server) Addr() *net.TCPAddr {
	tcpLn, _, _ := s.listeners()
	return tcpLn.Addr().(*net.TCPAddr)
}

// Serve serves HTTP/3 on the UDP socket and HTTP/2 and HTTP/1.1 on the TCP socket until
// Shutdown or Close, then returns http.ErrServerClosed. Any other error stops both.
func (s *Server) Serve() error {
	tcpLn, udpConn, adm := s.listeners()
	if tcpLn == nil {
		if err := s.Listen(); err != nil {
			return err
		}
		tcpLn, udpConn, adm = s.listeners()
	}
	qconf := &quic.Config{
		Allow0RTT:          true,
		MaxIdleTimeout:     idleTimeout,
		MaxIncomingStreams: int64(s.config().IP.MaxStreamsPerConnection),
	}
	tc := s.tlsConfig("h2", "http/1.1")
	s.tcp.GateHandshakes(tc, handshakesPerCore*runtime.GOMAXPROCS(0))
	h12 := &http.Server{
		Handler:             h2guard.Completions(s.handler),
		TLSConfig:           tc,
		ReadHeaderTimeout:   s.headerTimeout(),
		IdleTimeout:         idleTimeout,
		MaxHeaderBytes:      parseMaxHeaderBytes,
		MaxHeaderValueCount: parseMaxHeaderFields,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: s.config().IP.MaxStreamsPerConnection,
			// 16 KiB is the protocol's initial value; net/http's larger default fails an
			// h2spec case (4.2/3).
			MaxReadFrameSize: 16384,
		},
		ErrorLog:  slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnState: s.connState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return h2guard.ConnContext(s.tcp.ConnContext(s.connContext(ctx), h2guard.Raw(c)), c)
		},
	}
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.quicTr = &quic.Transport{
		Conn:                s.guard.WrapConn(udpConn),
		ConnContext:         s.metrics.ConnContext(s.shedConns(s.guard.ConnContext)),
		VerifySourceAddress: s.guard.VerifySourceAddress,
	}
	ln, err := s.quicTr.ListenEarly(http3.ConfigureTLSConfig(s.tlsConfig()), qconf)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("edge: quic listen: %w", err)
	}
	s.quicLn = ln
	h3 := &http3.Server{
		Handler:        s.handler,
		QUICConfig:     qconf,
		MaxHeaderBytes: parseMaxHeaderBytes,
		IdleTimeout:    idleTimeout,
		Logger:         s.log,
		ConnContext:    func(ctx context.Context, _ *quic.Conn) context.Context { return s.connContext(ctx) },
	}
	h3s := h3serve.New(h3, h3serve.Config{HeaderTimeout: s.headerTimeout(), Admit: s.admitH3Stream,
		Grow: growStack, Linger: shutdownLinger, Log: s.log})
	// HTTP/1.1 is h1serve's (issue 16: a proxied request costs 12-14 % less CPU than on
	// net/http's HTTP/1.1 loop); h2 connections go on to h12.
	h1 := h1serve.New(h12)
	s.h3s, s.h12, s.h1 = h3s, h12, h1
	s.mu.Unlock()

	go s.top.Age(s.done)
	go s.shedder.Run(s.done)
	go func() {
		if err := adm.Serve(); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin listener failed", "error", err)
		}
	}()
	go s.watchFiles(s.done)
	go s.kernelBans.Run(s.done)
	s.servePlain()
	s.startACME()
	errc := make(chan error, 2)
	go func() { errc <- h3s.Serve(s.guard.Listener(ln)) }()
	go func() {
		ln := tls.NewListener(h2guard.UnsentLimited(s.tcp.Listener(tcpLn)), h12.TLSConfig)
		errc <- h12.Serve(h1.Split(h2guard.NewListener(ln, h2guard.Config{
			HeaderTimeout: s.headerTimeout(),
			WriteTimeout:  func() time.Duration { return s.config().Limits.WriteTimeout },
			// A handler not yet started is one of the streams a client may have open.
			MaxUnseen: 2 * int64(s.config().IP.MaxStreamsPerConnection),
			// Past the edge's own limit a section gets 431 anyway; one that got there
			// by table references is a bomb.
			MaxHeaderBytes: maxHeaderBytes,
			Report:         s.chargeAbuse,
			Slow:           s.chargeSlow(writeTimeoutCharge),
		})))
	}()
	err = <-errc
	if !errors.Is(err, http.ErrServerClosed) {
		s.Close()
		<-errc
		return err
	}
	if err2 := <-errc; !errors.Is(err2, http.ErrServerClosed) && !errors.Is(err2, quic.ErrServerClosed) {
		return err2
	}
	return http.ErrServerClosed
}

// Shutdown stops accepting connections, sends GOAWAY on HTTP/2 and refuses new streams
// on HTTP/3 (no GOAWAY there: see package h3serve), and waits for in-flight requests until ctx
// ends; then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	s.mu.Lock()
	h3, h12, h1, quicLn, adm := s.h3s, s.h12, s.h1, s.quicLn, s.admin
	s.mu.Unlock()
	if h3 == nil {
		return errors.Join(adm.Shutdown(ctx), s.closeSockets())
	}
	var wg sync.WaitGroup
	var err3, err12, err1 error
	h12done := make(chan struct{})
	wg.Go(func() { err3 = h3.Shutdown(ctx) })
	wg.Go(func() { err12 = h12.Shutdown(ctx); close(h12done) })
	wg.Go(func() { err1 = h1.Shutdown(ctx) })
	// HTTP/3 closes each connection itself once its requests are done (h3serve.Server.Shutdown).
	// net/http's HTTP/2 now and then keeps waiting on an idle connection until the
	// timeout (2 of 80 shutdowns under load here): once no request has been in flight
	// for a moment, there is nothing left to wait for, so close what remains.
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var quietSince time.Time
		for {
			select {
			case <-h12done:
				return
			case now := <-tick.C:
				switch {
				case s.inflight.Load() > 0:
					quietSince = time.Time{}
				case quietSince.IsZero():
					quietSince = now
				case now.Sub(quietSince) >= shutdownLinger:
					h12.Close()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	})
	// New QUIC connections are refused from now on; established ones drain above.
	quicLn.Close()
	wg.Wait()
	if err12 != nil {
		h12.Close()
	}
	if err1 != nil {
		h1.Close()
	}
	// The admin listener goes last, so metrics stay scrapeable while draining.
	errAdmin := adm.Shutdown(ctx)
	s.closeSockets()
	return errors.Join(err3, err12, err1, errAdmin)
}

// shutdownLinger is how long Shutdown lets the last responses leave, once no request
// is in flight, before it closes the connections that are still open.
const shutdownLinger = 250 * time.Millisecond

// Close stops the server at once, aborting in-flight requests.
func (s *Server) Close() error {
	s.stop()
	s.mu.Lock()
	h3, h12, h1, adm := s.h3s, s.h12, s.h1, s.admin
	s.mu.Unlock()
	var errs []error
	if h3 != nil {
		h3.Close()
		errs = append(errs, h12.Close(), h1.Close())
	}
	errs = append(errs, adm.Close(), s.closeSockets())
	return errors.Join(errs...)
}

// stop marks the server as shutting down and ends its background work.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shutdown {
		s.shutdown = true
		close(s.done)
	}
}

// Reload loads the configuration again (Options.Load, or the file it came from) and
// applies it with the certificates and the keys file, as SIGHUP and POST
// /api/v1/reload do. If anything is invalid, or a setting that needs a restart changed,
// nothing changes and the error says what.
func (s *Server) Reload() error {
	return s.reloadConfig()
}

func (s *Server) closeSockets() error {
	s.routing.Load().retire(nil) // the pools' health checks stop, their connections close
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := []error{s.closeACME()} // before Redis: storage: redis uses it
	if s.redis != nil {
		errs = append(errs, s.redis.Close())
		s.redis = nil
	}
	if s.quicLn != nil {
		s.quicLn.Close()
	}
	if s.quicTr != nil {
		errs = append(errs, ignoreClosed(s.quicTr.Close()))
	}
	if s.udpConn != nil {
		errs = append(errs, ignoreClosed(s.udpConn.Close()))
	}
	if s.tcpLn != nil {
		errs = append(errs, ignoreClosed(s.tcpLn.Close()))
	}
	// What the access log holds is written. Close does not wait for handlers (Shutdown
	// does): the line of a request still running when it came is not.
	s.access.Swap(nil).Close()
	return errors.Join(errs...)
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
