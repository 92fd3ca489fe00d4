package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/h3edge/h3edge/limiter"
)

var (
	// ErrUnavailable is wrapped by every error that means Redis could not decide in
	// time: a timeout, a network or server error, an open circuit, a closed store. The
	// edge applies the policy's on_store_failure when errors.Is(err, ErrUnavailable).
	ErrUnavailable = errors.New("redisstore: store unavailable")
	// ErrCircuitOpen is returned while the circuit breaker is open: Redis was not asked.
	// It wraps ErrUnavailable.
	ErrCircuitOpen = fmt.Errorf("%w: circuit open", ErrUnavailable)
	// ErrClosed is returned after Close. It wraps ErrUnavailable.
	ErrClosed = fmt.Errorf("%w: store closed", ErrUnavailable)
	// ErrOverloaded is returned when more decisions wait for Redis than the batcher
	// holds (Batch.MaxQueue). It wraps ErrUnavailable.
	ErrOverloaded = fmt.Errorf("%w: too many decisions waiting", ErrUnavailable)
)

// Config configures a Store. The zero value of each field has the meaning its comment
// states; New validates the rest.
type Config struct {
	// Client is the Redis client. If nil, New makes one from URL, Cluster or Sentinel
	// (exactly one of them), with the options the decision path needs, and Close
	// closes it. A Client passed in must have been made with MaxRetries -1 (a retried
	// script could charge twice) and ContextTimeoutEnabled (or Timeout could not bound a
	// decision); New checks both on *redis.Client and *redis.ClusterClient. The caller
	// closes it, after Close.
	Client redis.UniversalClient
	// URL is redis://[user:password@]host:port/db, or rediss:// for TLS.
	URL string
	// Cluster lists seed addresses of a Redis Cluster.
	Cluster []string
	// Sentinel names a Sentinel-managed master.
	Sentinel *Sentinel
	// Username and Password authenticate to Cluster and Sentinel nodes (URL carries
	// its own).
	Username, Password string
	// TLS, if not nil, dials Cluster and Sentinel nodes with TLS.
	TLS *tls.Config

	// Timeout bounds one decision, from the call of Decide to its return, round trip
	// and any wait in the batcher included. Past it Decide returns an error wrapping
	// ErrUnavailable. If zero, 10ms is used; at most 5s.
	Timeout time.Duration
	// Batch sends concurrent decisions together.
	Batch Batch
	// NegativeCache remembers a denial until its RetryAfter and denies an identical
	// request (same policies, keys and costs) locally until then, without asking
	// Redis. It never admits anything Redis would deny.
	NegativeCache bool
	// NegativeCacheSize bounds the denials remembered. If zero, 65536 is used.
	NegativeCacheSize int
	// Lease returns how many units of a policy this edge may take from Redis at once
	// for a key and then spend locally (lease mode, the policy option `lease: N`); 0
	// means exact (every decision asks Redis). It is called once per *limiter.Policy
	// the store sees; values are capped at the policy's Quota. leaky_bucket and
	// concurrency policies are always exact. If nil, every policy is exact.
	//
	// A lease trades exactness for round trips: across E edges a key can be admitted
	// up to N×E units more than its quota in any window (0 more for fixed_window,
	// whose leases end with their window), and up to N×E units it could have had are
	// held unused until they return (at LeaseHold at the latest).
	Lease func(*limiter.Policy) int64
	// LeaseHold is how long leased units may be spent before those left return to
	// Redis; never longer than the policy's window. If zero, 1s is used.
	LeaseHold time.Duration
	// ConcurrencyTTL is how long a global concurrency unit stays held without
	// renewal: the store renews the units it holds every third of it, so the units of
	// an edge that dies return within ConcurrencyTTL. If zero, 10s is used; at least
	// 300ms.
	ConcurrencyTTL time.Duration
	// Breaker configures the circuit breaker.
	Breaker BreakerConfig
	// ClockSync is how often the offset between this edge's clock and Redis's (TIME)
	// is measured; decisions are made at the edge's instant plus that offset, so every
	// edge counts on the store's clock. If zero, 5s is used; if negative, instants are
	// used as given (the edges' clocks must agree).
	ClockSync time.Duration
	// Heartbeat is how often the store announces this edge in Redis, for FleetSize.
	// An announcement lives three periods. If zero, 1s is used.
	Heartbeat time.Duration
	// EdgeID names this edge in the fleet. If empty, a random id is used.
	EdgeID string
	// Logger receives the store's warnings. If nil, slog.Default() is used.
	Logger *slog.Logger

	// now is the local clock; if nil, time.Now. Tests skew it.
	now func() time.Time
}

// Sentinel names a Sentinel-managed master.
type Sentinel struct {
	// Master is the name of the master set.
	Master string
	// Addrs are the sentinels' host:port addresses.
	Addrs []string
}

// Batch configures the batching of concurrent decisions. A decision is sent at once
// when a flush slot is free; while every slot is busy, decisions queue, and the
// queue goes as one flush when a slot frees — one script call per Redis Cluster slot
// (one pipeline per node on a cluster) however many decisions it carries, each
// decision still all-or-nothing on its own. So batching adds no delay at low load
// and grows with load.
type Batch struct {
	// Disabled sends every decision on its own round trip (one EVALSHA each).
	Disabled bool
	// MaxSize bounds the decisions in one flush. If zero, 256 is used.
	MaxSize int
	// MaxDelay, if not zero, lets decisions wait up to this long for more to join
	// them while a flush is in flight and another slot is free. At most 1ms. If
	// zero, they do not wait (measured best here: waiting only lengthens the round
	// trips that batch the next decisions).
	MaxDelay time.Duration
	// MaxInFlight bounds the flushes in flight at once. If zero, 2 is used.
	MaxInFlight int
	// MaxQueue bounds the decisions waiting; past it Decide fails with ErrOverloaded.
	// If zero, 16384 is used.
	MaxQueue int
}

// Store is a limiter.Store that keeps state in Redis, shared by every edge that uses
// the same Redis, with the same semantics as limiter.Local: the same decisions at
// the same instants. It is safe for concurrent use.
type Store struct {
	cfg       Config
	rdb       redis.UniversalClient
	ownClient bool
	cluster   bool
	log       *slog.Logger
	now       func() time.Time
	timeout   time.Duration
	edgeID    string

	offset atomic.Int64 // ns from the local clock to Redis's
	br     breaker
	batch  *batcher // nil when batching is disabled
	neg    *negCache
	pol    policies
	seq    atomic.Uint64 // numbers concurrency leases

	// held are the concurrency units this store holds, by key.
	heldMu sync.Mutex
	held   map[string][]held

	// pools are the leased units, by key.
	poolMu sync.Mutex
	pools  map[string]*pool

	fleet atomic.Int64

	stop    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool
	probing atomic.Bool
}

// New returns a Store using Redis as cfg describes. It loads the scripts and measures
// the clock offset; if Redis does not answer within a second it still returns the
// Store, with its circuit breaker open, and keeps probing: Redis trouble never stops
// an edge from starting. Configuration errors are returned.
func New(cfg Config) (*Store, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "redisstore"),
		now:     cfg.now,
		timeout: cfg.Timeout,
		edgeID:  cfg.EdgeID,
		held:    make(map[string][]held),
		pools:   make(map[string]*pool),
		stop:    make(chan struct{}),
	}
	s.fleet.Store(1)
	s.br = breaker{failures: cfg.Breaker.Failures, period: cfg.Breaker.Period, onChange: cfg.Breaker.OnChange}
	rdb, own, err := cfg.client()
	if err != nil {
		return nil, err
	}
	s.rdb, s.ownClient = rdb, own
	_, s.cluster = rdb.(*redis.ClusterClient)
	if cfg.NegativeCache {
		s.neg = newNegCache(cfg.NegativeCacheSize)
	}
	if !cfg.Batch.Disabled {
		s.batch = newBatcher(s, cfg.Batch)
		s.wg.Add(1)
		go s.batch.run()
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err = s.sync(ctx, 5)
	cancel()
	if err != nil {
		s.log.Warn("redis unreachable at start; deciding fails until it answers", "err", err)
		s.br.open(s)
	}
	s.wg.Add(4)
	go s.clockLoop()
	go s.heartbeatLoop()
	go s.renewLoop()
	go s.poolLoop()
	return s, nil
}

// resolve applies defaults and validates.
func (c *Config) resolve() error {
	set := 0
	if c.Client != nil {
		set++
	}
	if c.URL != "" {
		set++
	}
	if len(c.Cluster) > 0 {
		set++
	}
	if c.Sentinel != nil {
		set++
	}
	if set != 1 {
		return errors.New("redisstore: set exactly one of Client, URL, Cluster and Sentinel")
	}
	if c.Sentinel != nil && (c.Sentinel.Master == "" || len(c.Sentinel.Addrs) == 0) {
		return errors.New("redisstore: Sentinel needs Master and Addrs")
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Millisecond
	}
	if c.Timeout < 0 || c.Timeout > 5*time.Second {
		return errors.New("redisstore: Timeout must be between 0 and 5s")
	}
	b := &c.Batch
	b.MaxSize = cmpOr(b.MaxSize, 256)
	b.MaxInFlight = cmpOr(b.MaxInFlight, 2)
	b.MaxQueue = cmpOr(b.MaxQueue, 16384)
	if b.MaxSize < 0 || b.MaxDelay < 0 || b.MaxDelay > time.Millisecond || b.MaxInFlight < 0 || b.MaxQueue < 0 {
		return errors.New("redisstore: Batch: sizes must be positive and MaxDelay at most 1ms")
	}
	c.NegativeCacheSize = cmpOr(c.NegativeCacheSize, 65536)
	c.LeaseHold = cmpOr(c.LeaseHold, time.Second)
	c.ConcurrencyTTL = cmpOr(c.ConcurrencyTTL, 10*time.Second)
	if c.ConcurrencyTTL < 300*time.Millisecond {
		return errors.New("redisstore: ConcurrencyTTL must be at least 300ms")
	}
	if c.NegativeCacheSize < 0 || c.LeaseHold < 0 {
		return errors.New("redisstore: NegativeCacheSize and LeaseHold must not be negative")
	}
	if err := c.Breaker.resolve(); err != nil {
		return err
	}
	c.ClockSync = cmpOr(c.ClockSync, 5*time.Second)
	c.Heartbeat = cmpOr(c.Heartbeat, time.Second)
	if c.Heartbeat < 0 {
		return errors.New("redisstore: Heartbeat must not be negative")
	}
	if c.EdgeID == "" {
		var b [6]byte
		rand.Read(b[:])
		c.EdgeID = hex.EncodeToString(b[:])
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	return nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// client returns the client to use and whether the store owns it.
func (c *Config) client() (redis.UniversalClient, bool, error) {
	if c.Client != nil {
		var retries int
		var ctxTimeout bool
		switch cl := c.Client.(type) {
		case *redis.Client:
			retries, ctxTimeout = cl.Options().MaxRetries, cl.Options().ContextTimeoutEnabled
		case *redis.ClusterClient:
			retries, ctxTimeout = cl.Options().MaxRetries, cl.Options().ContextTimeoutEnabled
		default:
			return c.Client, false, nil
		}
		if retries > 0 || !ctxTimeout {
			return nil, false, errors.New("redisstore: Client must be made with MaxRetries -1 and ContextTimeoutEnabled true")
		}
		return c.Client, false, nil
	}
	// Small budgets everywhere: a decision must never wait on a dead Redis beyond
	// Timeout, and a script is never retried (it might have run).
	ioTimeout := max(c.Timeout, 100*time.Millisecond)
	tune := func(o *redis.UniversalOptions) {
		o.MaxRetries = -1
		o.ContextTimeoutEnabled = true
		o.DialTimeout = max(c.Timeout, 250*time.Millisecond)
		o.DialerRetries = 1
		o.ReadTimeout, o.WriteTimeout = ioTimeout, ioTimeout
		o.PoolTimeout = c.Timeout
		o.PoolSize = max(10*runtime.GOMAXPROCS(0), 64) // unbatched, one per concurrent decision
		o.MinIdleConns = 2
		o.DisableIdentity = true
	}
	switch {
	case c.URL != "":
		opt, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, false, fmt.Errorf("redisstore: URL: %w", err)
		}
		u := &redis.UniversalOptions{Addrs: []string{opt.Addr}, DB: opt.DB, Username: opt.Username, Password: opt.Password, TLSConfig: opt.TLSConfig}
		tune(u)
		return redis.NewClient(u.Simple()), true, nil
	case len(c.Cluster) > 0:
		u := &redis.UniversalOptions{Addrs: c.Cluster, Username: c.Username, Password: c.Password, TLSConfig: c.TLS, IsClusterMode: true}
		tune(u)
		return redis.NewClusterClient(u.Cluster()), true, nil
	default:
		u := &redis.UniversalOptions{Addrs: c.Sentinel.Addrs, MasterName: c.Sentinel.Master, Username: c.Username, Password: c.Password, TLSConfig: c.TLS}
		tune(u)
		return redis.NewFailoverClient(u.Failover()), true, nil
	}
}

// sync loads the scripts (on every node of a cluster) and measures the clock.
func (s *Store) sync(ctx context.Context, samples int) error {
	for _, sc := range scripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return err
		}
	}
	return s.measureClock(ctx, samples)
}

// EdgeID returns this edge's id in the fleet.
func (s *Store) EdgeID() string { return s.edgeID }

// Close stops the store's goroutines, returns leased units, withdraws this edge from
// the fleet and closes the client if New made it. Concurrency units still held are
// not released: release them first, or they return within ConcurrencyTTL. Decisions
// after Close fail with ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.stop)
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), max(4*s.timeout, 250*time.Millisecond))
	defer cancel()
	s.returnPools(ctx, true)
	s.rdb.ZRem(ctx, fleetKey, s.edgeID)
	s.rdb.Del(ctx, edgeKeyPre+s.edgeID)
	if s.ownClient {
		return s.rdb.Close()
	}
	return nil
}

// Decide implements limiter.Store: it decides reqs together, all-or-nothing, at instant
// now (corrected to the Redis clock), appending one Decision per request to out.
//
// On error nothing more is appended, allowed is false and the error wraps
// ErrUnavailable (or limiter.ErrInvalidRequest). A decision that timed out may still
// have been charged in Redis; it is never charged twice.
//
// Requests for different client keys on a Redis Cluster live on different slots and
// are decided by one script call per slot, all sent at once. If one slot denies while
// another admitted, the admitted slot's charge is refunded before Decide returns,
// within what is left of Timeout: all-or-nothing holds for what is stored, but during
// that round trip the refunded units were unavailable to others (this can only deny,
// never over-admit), and if the refund fails they stay charged (it is not retried: it
// may have run). On a single Redis or Sentinel every request goes to one call,
// atomically.
func (s *Store) Decide(ctx context.Context, now time.Time, reqs []limiter.Request, out []limiter.Decision) ([]limiter.Decision, bool, error) {
	if s.closed.Load() {
		return out, false, ErrClosed
	}
	if len(reqs) == 0 {
		return out, true, nil
	}
	start := time.Now()
	var infoBuf [8]*policyInfo
	infos := infoBuf[:0]
	leased := false
	for i := range reqs {
		r := &reqs[i]
		pi, ok := (*policyInfo)(nil), false
		if r.Policy != nil && r.Cost >= 0 {
			pi, ok = s.pol.get(r.Policy, s.cfg.Lease, s.cfg.ConcurrencyTTL)
		}
		if !ok {
			return out, false, fmt.Errorf("%w: request %d", limiter.ErrInvalidRequest, i)
		}
		infos = append(infos, pi)
		leased = leased || pi.lease > 0 && r.Cost > 0
	}
	t := now.UnixNano() + s.offset.Load()
	if t <= 0 {
		return out, false, fmt.Errorf("%w: instant before 1970", limiter.ErrInvalidRequest)
	}
	first := len(out)
	if s.neg != nil {
		if o, ok := s.neg.lookup(reqs, infos, t, out); ok {
			limiter.Record(reqs, o[first:], false)
			return o, false, nil
		}
	}
	var lp *leasePlan
	if leased {
		lp = s.leaseTake(reqs, infos, t)
		if lp.all {
			out = lp.decisions(reqs, infos, t, out)
			limiter.Record(reqs, out[first:], true)
			return out, true, nil
		}
	}
	if !s.br.allow() {
		lp.giveBack()
		return out, false, ErrCircuitOpen
	}
	deadline := start.Add(s.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c := s.newCall(t, reqs, infos, lp)
	defer c.free()
	if err := s.run(ctx, start, deadline, c); err != nil {
		lp.giveBack()
		if len(c.segs) > 1 { // a cluster node failed: undo what the others charged
			s.refundAdmitted(ctx, time.Now().Add(s.timeout), c)
		}
		return out, false, err
	}
	for range reqs {
		out = append(out, limiter.Decision{})
	}
	dec := out[first:]
	allowed := s.derive(c, reqs, infos, dec)
	if lp != nil {
		if allowed {
			lp.settle(s, c, reqs, infos, dec)
		} else {
			lp.giveBack()
		}
	}
	if !allowed && len(c.segs) > 1 {
		s.refundAdmitted(ctx, deadline, c)
	}
	if allowed {
		s.hold(c)
	} else if s.neg != nil {
		s.neg.put(reqs, infos, t, dec)
	}
	limiter.Record(reqs, dec, allowed)
	return out, allowed, nil
}

// run sends the call's segments, through the batcher if there is one, and waits for
// their replies until the decision's budget runs out.
func (s *Store) run(ctx context.Context, start, deadline time.Time, c *call) error {
	if s.batch == nil {
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		err := s.exec(ctx, c.segs)
		s.report(err)
		return c.err(err)
	}
	c.queued, c.deadline = start, deadline
	if err := s.batch.submit(c); err != nil {
		return err
	}
	// The batcher answers every call by its deadline (a failed or expired round trip
	// answers with an error), so neither a timer per decision nor ctx is needed here.
	s.batch.wait(c)
	return c.err(nil)
}

// report feeds a round trip's outcome to the circuit breaker.
func (s *Store) report(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		s.br.success()
		return
	}
	if s.br.failure(s.now()) {
		s.log.Warn("circuit breaker open: redis is failing", "err", err)
		s.startProbe()
	}
}

// Breaker returns the state of the circuit breaker.
func (s *Store) Breaker() BreakerState { return s.br.get() }

// Offset returns the measured offset from this edge's clock to Redis's.
func (s *Store) Offset() time.Duration { return time.Duration(s.offset.Load()) }

// FleetSize returns how many edges announced themselves in Redis within the last
// three heartbeats, this one included; while Redis is unreachable, the last count
// seen. It is at least 1. Use it for on_store_failure: local (quota ÷ FleetSize).
func (s *Store) FleetSize() int { return int(max(s.fleet.Load(), 1)) }
