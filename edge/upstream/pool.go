// Package upstream is h3edge's side towards the origins: pools of weighted targets,
// load balancing (round robin, least requests by two random choices, rendezvous
// hashing by client key), active health checks and passive outlier ejection, retries
// under a retry budget, and the proxying transport (DESIGN.md §9).
//
// A Pool is an http.Handler: it proxies a request to one of its targets with a proxy
// loop of its own (proxy.go: what httputil.ReverseProxy does, without its copies),
// each target reached through its own Transport, so the transport can be replaced
// (Config.NewTransport) without touching balancing, health or retries.
//
// At about 2 750 lines it is over the module's ~2 000 and stays one package: the
// HTTP/1.1 client (h1client.go, h1write.go, h1read.go) meets the try and the proxy loop through
// unexported contracts — a deadline instead of a context and a timer per try
// (deadlineTransport), the 1xx hook without a ClientTrace (informer), the try's one
// allocation holding the body wrappers — which a sub-package could keep only by
// exporting them; each concern has its own file instead.
package upstream

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Errors a Pool hands its ErrorHandler; others are the transport's.
var (
	// ErrNoHealthy: every target is ejected or failing its health checks. Answer 503
	// with Retry-After (NoHealthyError tells when to retry).
	ErrNoHealthy = errors.New("upstream: no healthy target")
	// ErrTimeout: no response header within Config.Timeout (queueing for a connection
	// and dialling included). It wraps context.DeadlineExceeded.
	ErrTimeout = timeoutError{}
	// ErrIdle: a response body brought nothing within Config.ReadTimeout. It is a
	// read's error, after the header: the client's response is cut off.
	ErrIdle = errors.New("upstream: no response bytes within the read timeout")
)

type timeoutError struct{}

func (timeoutError) Error() string   { return "upstream: no response header within the timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
func (timeoutError) Unwrap() error   { return context.DeadlineExceeded }

// NoHealthyError is ErrNoHealthy with the time after which a target may be back.
type NoHealthyError struct {
	// RetryAfter is when the earliest ejection ends, or the health check interval;
	// at least 1s.
	RetryAfter time.Duration
}

func (e *NoHealthyError) Error() string { return ErrNoHealthy.Error() }

// Is makes errors.Is(err, ErrNoHealthy) hold.
func (e *NoHealthyError) Is(target error) bool { return target == ErrNoHealthy }

// Balance is how a pool picks a target.
type Balance int

const (
	// RoundRobin takes the targets in turn, in proportion to their weights (smooth
	// weighted round robin: a weight-3 target is not sent three requests in a row).
	RoundRobin Balance = iota
	// LeastRequests takes the target with fewer requests in flight (per unit of
	// weight) of two chosen at random: near the best choice at the cost of two reads.
	LeastRequests
	// Hash takes the target with the highest rendezvous score for the request's client
	// key (WithClientKey): a key stays on its target while it is healthy, and a target
	// that leaves moves only its own keys. Requests without a key go round robin.
	Hash
)

// ParseBalance maps the configuration's names to a Balance.
func ParseBalance(s string) (Balance, bool) {
	switch s {
	case "round_robin", "":
		return RoundRobin, true
	case "least_requests":
		return LeastRequests, true
	case "hash":
		return Hash, true
	}
	return 0, false
}

func (b Balance) String() string {
	switch b {
	case LeastRequests:
		return "least_requests"
	case Hash:
		return "hash"
	}
	return "round_robin"
}

// Target is one origin of a pool.
type Target struct {
	// URL is the target's base: scheme http, https or h2c (HTTP/2 without TLS), host
	// and port; a path, if any, is put before every request's.
	URL *url.URL
	// Weight is the target's share relative to the others'. If zero, 1 is used.
	Weight int
}

// HealthCheck configures active checks: a GET of Path on every target every Interval,
// jittered by ±10 %.
type HealthCheck struct {
	Path      string        // request path; 2xx and 3xx are successes
	GRPC      bool          // gRPC's health protocol instead (grpcHealth), asking about Service
	Service   string        // the service a GRPC check asks about; "": the server
	Interval  time.Duration // between two checks of one target; at least 10ms
	Timeout   time.Duration // bound of one check; if zero, Interval
	Unhealthy int           // failures in a row that take a target out; if zero, 1
	Healthy   int           // successes in a row that bring it back; if zero, 1
}

// Passive configures outlier ejection from the outcomes of real requests: Failures in
// a row (connect errors, timeouts, resets, 502, 503, 504) within Within eject a target for Eject, then
// one successful request or check brings it back, one more failure ejects it again.
type Passive struct {
	Failures int // if zero, passive ejection is off
	Within   time.Duration
	Eject    time.Duration
}

// Config describes a pool. Only Name and Targets are required.
type Config struct {
	// Name names the pool in metrics, logs and the status.
	Name string
	// Targets are the pool's origins. At least one; a retry avoids the targets tried
	// before among the first 64.
	Targets []Target
	// Balance picks a target per request.
	Balance Balance
	// Health, if not nil, turns on active checks.
	Health *HealthCheck
	// Passive configures outlier ejection (off when Failures is zero).
	Passive Passive
	// Retries bounds the tries after the first: on another target, for a request that
	// never reached one (connection refused, reset before the request was written)
	// whatever its method, and for an idempotent request also after an error before
	// the response header or a 502 or 503 — all within the retry budget (RetryBudget
	// of the pool's requests in the last 10 s) and only for a body not read yet or
	// read whole within MaxReplayBody.
	Retries int
	// Timeout bounds the wait for a response header per try. If zero, 30s is used.
	Timeout time.Duration
	// ReadTimeout bounds each wait for the next bytes of a response body: past it the
	// body's read fails with ErrIdle, and the client's response is cut off. A gRPC
	// client's deadline (grpc-timeout), when longer, takes its place. The time the
	// edge spends writing to the client does not count. If zero, 5m is used.
	ReadTimeout time.Duration
	// MaxConnections caps the connections to each target (requests over it wait for
	// one, within Timeout). If zero, there is no cap.
	MaxConnections int
	// RootCAs verifies https:// targets. If nil, the system roots are used.
	RootCAs *x509.CertPool
	// Rewrite, if not nil, adjusts each outgoing request out (forwarded fields, Host)
	// after the pool has set it up from the incoming request in, which it must not
	// change. out's header is its own, its value slices shared with in's: set a field
	// to a new slice rather than change a value in place (an append copies). Rewrite
	// must not change the URL's scheme or host.
	Rewrite func(out, in *http.Request)
	// ErrorHandler answers a request the pool could not proxy: ErrNoHealthy (a
	// *NoHealthyError), ErrTimeout, or the transport's error. If nil, 502 (503 and 504
	// for those two) with no body.
	ErrorHandler func(http.ResponseWriter, *http.Request, error)
	// OnTry, if not nil, is told of each try before it is sent: the request (its
	// context is the incoming request's) and the target, scheme://host as the status
	// names it. Of a request's calls the last names the target that answered, or
	// failed last. It runs on the request's goroutine.
	OnTry func(r *http.Request, target string)
	// NewTransport builds the transport of one target. If nil, DefaultTransport.
	NewTransport func(Target, *Config) Transport
	// Logger receives health transitions. If nil, slog.Default().
	Logger *slog.Logger
	// Inherit, if not nil, is the pool this one replaces (a reload that changed its
	// settings): each target of the same URL starts with that target's health,
	// ejection, latencies and counters, and the pool with its retry and duration
	// counters, instead of anew. The counters are shared, not copied: requests still
	// finishing on the old pool count in the new one's.
	Inherit *Pool
}

// Pool proxies requests to a set of targets. Make it with New, stop it with Close.
// It is safe for concurrent use.
type Pool struct {
	cfg     Config
	targets []*target
	log     *slog.Logger
	budget  retryBudget
	stats   *poolStats // shared with the pool it replaces (Config.Inherit)
	rr      smoothRR
	host    string // "upstream." + Name: the outgoing URL's host until a try picks the target

	inflight atomic.Int64
	closed   atomic.Bool
	ctx      context.Context // ends when the pool closes: health checks stop
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// New builds a pool and starts its health checks.
func New(cfg Config) (*Pool, error) {
	if len(cfg.Targets) == 0 {
		return nil, errors.New("upstream: a pool needs at least one target")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 5 * time.Minute
	}
	if cfg.NewTransport == nil {
		cfg.NewTransport = DefaultTransport
	}
	if h := cfg.Health; h != nil {
		hc := *h
		if hc.Interval < 10*time.Millisecond {
			return nil, errors.New("upstream: health interval below 10ms")
		}
		if hc.Timeout <= 0 || hc.Timeout > hc.Interval {
			hc.Timeout = hc.Interval
		}
		hc.Unhealthy, hc.Healthy = max(hc.Unhealthy, 1), max(hc.Healthy, 1)
		cfg.Health = &hc
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &Pool{cfg: cfg, stats: new(poolStats), log: log.With("component", "upstream", "upstream", cfg.Name), host: "upstream." + cfg.Name}
	p.ctx, p.stop = context.WithCancel(context.Background())
	for i, t := range cfg.Targets {
		if t.URL == nil || t.URL.Host == "" {
			return nil, errors.New("upstream: a target needs a URL with a host")
		}
		if t.Weight <= 0 {
			t.Weight = 1
		}
		nt := newTarget(i, t, cfg.NewTransport(t, &cfg))
		if cfg.Health != nil {
			// A transport of the checks' own: a target whose max_connections are all
			// held by long polls or WebSockets is busy, not down, and its checks must
			// not queue behind them and fail.
			nt.probe = cfg.NewTransport(t, &cfg)
		}
		p.targets = append(p.targets, nt)
	}
	if old := cfg.Inherit; old != nil {
		p.inherit(old)
		p.cfg.Inherit = nil // not kept alive by the new pool
	}
	if cfg.Health != nil {
		for _, t := range p.targets {
			p.wg.Add(1)
			go p.runChecks(t)
		}
	}
	return p, nil
}

// inherit gives p's targets the state of old's of the same URL, before p serves.
func (p *Pool) inherit(old *Pool) {
	byURL := make(map[string]*target, len(old.targets))
	for _, t := range old.targets {
		byURL[t.url.String()] = t
	}
	for _, t := range p.targets {
		if o := byURL[t.url.String()]; o != nil {
			// A verdict only where something here can end it: active checks'
			// where p checks, an ejection where p ejects.
			t.inherit(o, p.cfg.Health != nil, p.cfg.Passive.Failures)
		}
	}
	p.stats = old.stats
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.cfg.Name }

// Balance returns how the pool picks a target.
func (p *Pool) Balance() Balance { return p.cfg.Balance }

// ServeHTTP proxies r to one of the pool's targets, retrying on another as Config.Retries
// allows. Responses stream: bodies of unknown length are flushed as they arrive.
func (p *Pool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.serve(w, r)
}

// rewrite points the outgoing request at the pool; the try picks the target.
func (p *Pool) rewrite(out, in *http.Request) {
	out.URL.Scheme, out.URL.Host = "http", p.host
	out.Host = in.Host
	if p.cfg.Rewrite != nil {
		p.cfg.Rewrite(out, in)
	}
}

// errorHandler answers a request the pool could not proxy (Config.ErrorHandler).
func (p *Pool) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if p.cfg.ErrorHandler != nil {
		p.cfg.ErrorHandler(w, r, err)
		return
	}
	switch {
	case errors.Is(err, ErrNoHealthy):
		w.WriteHeader(http.StatusServiceUnavailable)
	case errors.Is(err, context.DeadlineExceeded):
		w.WriteHeader(http.StatusGatewayTimeout)
	default:
		w.WriteHeader(http.StatusBadGateway)
	}
}

// Close stops the health checks and closes the idle connections to the targets;
// requests in flight finish, and the connections they used are closed once the last
// one has (a reload that replaces the pool drains the old one this way).
func (p *Pool) Close() {
	if p.closed.Swap(true) {
		return
	}
	p.stop()
	p.wg.Wait()
	p.closeIdle()
}

func (p *Pool) closeIdle() {
	for _, t := range p.targets {
		t.rt.CloseIdleConnections()
		if t.probe != nil {
			t.probe.CloseIdleConnections()
		}
	}
}

// requestDone notes the end of one request of the pool; the last one of a closed
// pool closes the connections it left idle.
func (p *Pool) requestDone() {
	if p.inflight.Add(-1) == 0 && p.closed.Load() {
		p.closeIdle()
	}
}

type clientKey struct{}

// WithClientKey returns a context that carries the client key a Hash pool hashes.
func WithClientKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, clientKey{}, key)
}

func clientKeyOf(ctx context.Context) string {
	k, _ := ctx.Value(clientKey{}).(string)
	return k
}
