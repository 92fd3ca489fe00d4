// Package quicconn is the QUIC side of admission: a UDP socket that drops banned
// sources' datagrams before quic-go parses them, per-source connection and stream
// budgets, a connection cap per source, the Retry policy, and closing the connections of
// a source once it is banned.
//
// A Guard plugs into the edge's own quic.Transport:
//
//	g, err := quicconn.New(cfg)
//	tr := &quic.Transport{
//		Conn:                g.WrapConn(udpConn),   // banned datagrams never reach quic-go
//		ConnContext:         g.ConnContext,         // budget and cap; CONNECTION_REFUSED
//		VerifySourceAddress: g.VerifySourceAddress, // Retry in a surge or before refusing
//	}
//	ln, err := tr.ListenEarly(tlsConf, qconf)
//	go h3srv.ServeListener(g.Listener(ln))          // registers connections for Kick
//
// then, per new request stream of any protocol, g.AllowStream(clientIP, time.Now()), and
// on every new ban g.Kick(prefix).
package quicconn

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/bpf"

	"github.com/h3edge/h3edge/limiter"
)

// Errors ConnContext and Admit return; quic-go answers any of them with
// CONNECTION_REFUSED.
var (
	ErrBanned      = errors.New("quicconn: source banned")
	ErrRate        = errors.New("quicconn: source over its connection budget")
	ErrMaxConns    = errors.New("quicconn: source at its connection cap")
	ErrNotAdmitted = errors.New("quicconn: connection not admitted by this Guard's ConnContext")
)

// ErrCodeExcessiveLoad is the application error code Kick closes connections with:
// HTTP/3's H3_EXCESSIVE_LOAD (RFC 9114, section 8.1).
const ErrCodeExcessiveLoad quic.ApplicationErrorCode = 0x107

// Guard admits QUIC connections and request streams per source. It is safe for
// concurrent use.
//
// Per-source state lives in a sharded table of at most Config.MaxTracked entries. An
// entry that carries no information (both buckets full, no open connection) equals a
// fresh one and is forgotten by an incremental sweep: every insertion examines a few
// entries, an insertion into a full shard a few dozen. An entry with open connections or
// a bucket that is not full is never evicted for a newcomer; a new source that finds its
// shard full of such entries is admitted against the shard's overflow entry instead — one
// source's budget shared by all of them, separately for validated and unvalidated
// addresses — and VerifySourceAddress asks it for a Retry first. A spoofed-source flood
// thus cannot evict real state or grow the table, and it cannot drain the budget of
// newcomers that proved their address.
type Guard struct {
	cfg   Config
	lim   atomic.Pointer[limits] // swapped by SetLimits
	tab   *table
	epoch time.Time
	now   func() time.Time

	handshakes window
	// handshaking counts admitted QUIC connections whose handshake has not completed:
	// what a spoofed source that never answers leaves behind, until quic-go's handshake
	// timeout.
	handshaking atomic.Int64

	dropped, refusedBanned, retriesSurge, retriesSource, kicked atomic.Uint64

	// The kernel-level ban filter (SetKernelBans): the Sockets WrapConn made, and the
	// program in force.
	kmu    sync.Mutex
	ksocks []*Socket
	kprog  []bpf.RawInstruction
}

// New returns a Guard for cfg, or an error wrapping ErrConfig.
func New(cfg Config) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	g := &Guard{
		cfg:   cfg,
		tab:   newTable(cfg.MaxTracked, cfg.IPv4Prefix, cfg.IPv6Prefix),
		epoch: time.Now(),
		now:   time.Now,
	}
	g.lim.Store(newLimits(cfg))
	return g, nil
}

// limits are the budgets a Guard applies, replaceable while it runs.
type limits struct {
	conn, stream bucket
	maxConns     int
	retryAbove   float64
}

func newLimits(cfg Config) *limits {
	return &limits{
		conn:       newBucket(cfg.ConnRate, cfg.ConnBurst),
		stream:     newBucket(cfg.StreamRate, cfg.StreamBurst),
		maxConns:   cfg.MaxConnections,
		retryAbove: cfg.RetryAbove,
	}
}

// ErrRestartNeeded reports a SetLimits change that only a new Guard can make.
var ErrRestartNeeded = errors.New("quicconn: MaxTracked and the prefix lengths cannot change while running")

// SetLimits replaces the budgets (rates, bursts, MaxConnections, RetryAbove) without
// forgetting any source: buckets keep their state and refill at the new rate from now
// on. MaxTracked, the prefix lengths and Banned cannot change (ErrRestartNeeded).
func (g *Guard) SetLimits(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if cfg.MaxTracked != g.cfg.MaxTracked || cfg.IPv4Prefix != g.cfg.IPv4Prefix || cfg.IPv6Prefix != g.cfg.IPv6Prefix {
		return ErrRestartNeeded
	}
	g.lim.Store(newLimits(cfg))
	return nil
}

// instant turns now into nanoseconds since the Guard's epoch (monotonic when now is).
func (g *Guard) instant(now time.Time) int64 { return int64(now.Sub(g.epoch)) }

// Sources returns how the Guard cuts addresses into sources, for state kept per
// source elsewhere that must agree with its budgets.
func (g *Guard) Sources() limiter.SourcePrefix { return g.tab.sources }

func (g *Guard) banned(a netip.Addr) bool {
	return g.cfg.Banned != nil && g.cfg.Banned(a)
}

// Slot is an admitted connection's place in its source's count of open connections.
// Release gives it back.
type Slot struct {
	g    *Guard
	key  limiter.Source
	addr netip.Addr
	ctx  slotCtx // the context ConnContext returns; carries the Slot

	// Guarded by the shard's mu.
	prev, next *Slot
	released   bool
	overflow   bool

	conn   atomic.Pointer[quic.Conn] // set by Track
	kicked atomic.Bool
	// handshaking is true from ConnContext until the handshake completes or the
	// connection ends: the slot counts in Guard.handshaking.
	handshaking atomic.Bool
}

// handshakeDone takes the slot out of Guard.handshaking, once.
func (s *Slot) handshakeDone() {
	if s.handshaking.CompareAndSwap(true, false) {
		s.g.handshaking.Add(-1)
	}
}

// awaitHandshake runs while c handshakes (ListenEarly hands connections out before
// the client has finished, Listen after).
func (s *Slot) awaitHandshake(c *quic.Conn) {
	select {
	case <-c.HandshakeComplete():
	case <-c.Context().Done():
	}
	s.handshakeDone()
}

// Release returns the slot. It is idempotent and safe for concurrent use.
func (s *Slot) Release() {
	s.handshakeDone()
	sh := s.g.tab.shard(s.key)
	sh.mu.Lock()
	if !s.released {
		s.released = true
		sh.unlink(s)
		if !s.overflow {
			// Entries with open connections are never evicted, so the entry is there.
			e := sh.entries[s.key]
			e.open--
			sh.entries[s.key] = e
		}
	}
	sh.mu.Unlock()
}

// slotCtx is the connection context ConnContext returns: the context quic-go passed in,
// plus the Slot as a value.
type slotCtx struct {
	context.Context
	s *Slot
}

type slotKey struct{}

func (c *slotCtx) Value(key any) any {
	if key == (slotKey{}) {
		return c.s
	}
	return c.Context.Value(key)
}

// Admit counts a new connection from addr at now against its source's budget and cap.
// It refuses with ErrMaxConns when the source has MaxConnections open, else with ErrRate
// when its connection bucket is empty; a refusal spends nothing. The caller must Release
// the Slot when the connection ends. ConnContext calls it for QUIC; the edge may call it
// for TCP connections so both share one budget.
func (g *Guard) Admit(addr netip.Addr, now time.Time) (*Slot, error) {
	return g.admit(addr.Unmap(), g.instant(now), false)
}

func (g *Guard) admit(a netip.Addr, t int64, validated bool) (*Slot, error) {
	k := g.tab.key(a)
	sh := g.tab.shard(k)
	sh.mu.Lock()
	lim := g.lim.Load()
	e, tracked := sh.lookup(k, t, g.tab.perShard, validated)
	if tracked && lim.maxConns > 0 && e.open >= uint32(lim.maxConns) {
		sh.refusedMax++
		sh.mu.Unlock()
		return nil, ErrMaxConns
	}
	if !lim.conn.take(&e.conn, t) {
		sh.refusedRate++
		sh.mu.Unlock()
		return nil, ErrRate
	}
	if tracked {
		e.open++
	}
	sh.store(k, e, tracked, validated)
	s := &Slot{g: g, key: k, addr: a, overflow: !tracked}
	s.ctx.s = s
	sh.link(s)
	sh.mu.Unlock()
	return s, nil
}

// ConnContext is quic.Transport.ConnContext. It refuses (quic-go then answers
// CONNECTION_REFUSED before any connection state exists) a banned source, a source at
// MaxConnections and a source over its connection budget. An admitted connection counts
// as open until quic-go cancels ctx, which it does when the connection closes or its
// handshake fails for any reason, so refused-later and failed connections give their
// slot back too.
func (g *Guard) ConnContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	a, ok := addrOf(info.RemoteAddr)
	if !ok {
		return ctx, nil // not an IP source: nothing to count
	}
	if g.banned(a) {
		g.refusedBanned.Add(1)
		return nil, ErrBanned
	}
	s, err := g.admit(a, g.instant(g.now()), info.AddrVerified)
	if err != nil {
		return nil, err
	}
	s.ctx.Context = ctx
	s.handshaking.Store(true)
	g.handshaking.Add(1)
	context.AfterFunc(ctx, s.Release)
	return &s.ctx, nil
}

// VerifySourceAddress is quic.Transport.VerifySourceAddress, called by quic-go for
// every Initial that carries no valid token. It answers true (send a Retry) when the
// Guard-wide rate of such Initials, over a sliding second, exceeds RetryAbove, or more
// than RetryAbove ÷ 10 admitted connections have not finished their handshake, or when
// the source would be refused (at its cap or over its budget: make it prove its address
// before the refusal), or when it is new and its shard is full. It spends nothing and
// runs on quic-go's server goroutine: one mutex, one map lookup.
//
// The bound on unfinished handshakes is what holds a spoofed flood's memory: each
// Initial let through is a connection quic-go keeps (with ListenEarly, serves) until
// its handshake timeout, whatever the rate; and the rate is counted here, behind
// quic-go's queue of unprocessed packets, so a server that reads Initials more slowly
// than they come measures its own pace, not the flood's.
func (g *Guard) VerifySourceAddress(addr net.Addr) bool {
	t := g.instant(g.now())
	lim := g.lim.Load()
	if lim.retryAbove >= 0 {
		rate := g.handshakes.hit(t)
		if rate > lim.retryAbove || float64(g.handshaking.Load()) > lim.retryAbove/10 {
			g.retriesSurge.Add(1)
			return true
		}
	}
	a, ok := addrOf(addr)
	if !ok {
		return false
	}
	k := g.tab.key(a)
	sh := g.tab.shard(k)
	sh.mu.Lock()
	e, tracked := sh.entries[k]
	var retry bool
	if tracked {
		retry = lim.maxConns > 0 && e.open >= uint32(lim.maxConns) ||
			!lim.conn.ready(e.conn, t)
	} else {
		retry = len(sh.entries) >= g.tab.perShard
	}
	sh.mu.Unlock()
	if retry {
		g.retriesSource.Add(1)
	}
	return retry
}

// AllowStream spends one token of addr's stream budget at now and reports whether the
// stream may proceed. Call it for every new request stream, whatever the protocol,
// before the request is parsed; refuse HTTP/3 streams with H3_REQUEST_REJECTED, HTTP/2
// and HTTP/1.1 requests with the prebuilt 429. It allocates nothing.
func (g *Guard) AllowStream(addr netip.Addr, now time.Time) bool {
	lim := g.lim.Load()
	if lim.stream.every == 0 {
		return true
	}
	t := g.instant(now)
	k := g.tab.key(addr)
	sh := g.tab.shard(k)
	sh.mu.Lock()
	e, tracked := sh.entries[k]
	if !tracked {
		e, tracked = sh.lookup(k, t, g.tab.perShard, false)
	}
	if !lim.stream.take(&e.stream, t) {
		sh.refusedStreams++
		sh.mu.Unlock()
		return false
	}
	sh.store(k, e, tracked, false)
	sh.mu.Unlock()
	return true
}

// Track registers c, accepted from a listener of a Transport whose ConnContext is this
// Guard's, so that Kick can close it. The registration ends by itself with the
// connection. If c's source is banned or was kicked while c was handshaking, Track closes
// c and returns ErrBanned; if c did not pass through ConnContext, ErrNotAdmitted.
func (g *Guard) Track(c *quic.Conn) error {
	s, ok := c.Context().Value(slotKey{}).(*Slot)
	if !ok || s.g != g {
		return ErrNotAdmitted
	}
	s.conn.Store(c)
	if s.handshaking.Load() {
		go s.awaitHandshake(c)
	}
	// Kick sets kicked before it loads conn; we store conn before we load kicked: one of
	// the two sees the other.
	if s.kicked.Load() || g.banned(s.addr) {
		g.kicked.Add(1)
		c.CloseWithError(ErrCodeExcessiveLoad, "banned")
		return ErrBanned
	}
	return nil
}

// Kick closes, with ErrCodeExcessiveLoad, every tracked connection whose peer address
// lies in p, and marks connections of p still in their handshake so Track closes them.
// Call it when p is banned; the Socket already drops p's datagrams, so without Kick its
// connections would only end at their idle timeout. It returns the number of
// connections closed, once they are closed (each within a few milliseconds).
func (g *Guard) Kick(p netip.Prefix) int {
	p = unmapPrefix(p).Masked()
	if !p.IsValid() {
		return 0
	}
	var victims []*quic.Conn
	collect := func(head *Slot) {
		for s := head; s != nil; s = s.next {
			if p.Contains(s.addr) {
				s.kicked.Store(true)
				// A closed connection may hold its slot a moment longer: its release
				// runs once quic-go has cancelled the connection's context.
				if c := s.conn.Load(); c != nil && c.Context().Err() == nil {
					victims = append(victims, c)
				}
			}
		}
	}
	if p.Bits() >= g.tab.sources.Bits(limiter.AddrSource(p.Addr())) {
		// p lies within one source: one list to look at.
		k := g.tab.key(p.Addr())
		sh := g.tab.shard(k)
		sh.mu.Lock()
		collect(sh.conns[k])
		sh.mu.Unlock()
	} else {
		// p spans sources: visit every shard's sources with open connections, one lock
		// at a time.
		for i := range g.tab.shards {
			sh := &g.tab.shards[i]
			sh.mu.Lock()
			for k, head := range sh.conns {
				if p.Contains(k.Addr()) {
					collect(head)
				}
			}
			sh.mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for _, c := range victims {
		wg.Go(func() { closeBanned(c) })
	}
	wg.Wait()
	g.kicked.Add(uint64(len(victims)))
	return len(victims)
}

// closeBanned closes c and waits until it is closed.
func closeBanned(c *quic.Conn) { c.CloseWithError(ErrCodeExcessiveLoad, "banned") }

// Stats is a snapshot of a Guard's state and counters, for metrics (DESIGN.md §7).
// Connection refusals and Retries count Initial packets, as quic-go decides per packet:
// a first flight carrying a post-quantum key share spans two Initials.
type Stats struct {
	Tracked int // per-source entries held (tracked_sources), ≤ MaxTracked
	Open    int // connections counted open (admitted, not yet released)
	// Handshaking is the QUIC connections admitted whose handshake has not completed.
	Handshaking int

	DroppedBanned uint64 // datagrams a Socket dropped: dropped_datagrams_total{reason="banned"}
	// DroppedKernel is the kernel's drop counter of the Sockets' UDP sockets (sk_drops,
	// 32 bits, per socket): datagrams the kernel ban filter (SetKernelBans) dropped,
	// plus those dropped for a full receive buffer — the kernel counts both together.
	DroppedKernel uint64

	// Connections refused, refused_connections_total{proto="h3",reason=…}.
	RefusedBanned   uint64 // reason="banned"
	RefusedRate     uint64 // reason="rate": connection budget, overflow budget included
	RefusedMaxConns uint64 // reason="max_connections"

	RefusedStreams uint64 // AllowStream false: refused_streams_total{reason="rate"}

	// VerifySourceAddress answers true: Retries requested (quic-go drops a Retry when
	// its queue is full).
	RetriesSurge  uint64 // the Guard-wide handshake rate was above RetryAbove, or too many were unfinished
	RetriesSource uint64 // the source would have been refused, or its shard was full

	Overflowed uint64 // decisions taken against an overflow entry: the table was full
	Kicked     uint64 // connections closed by Kick or Track
}

// Stats returns a snapshot. It locks each shard in turn, briefly.
func (g *Guard) Stats() Stats {
	st := Stats{
		DroppedBanned: g.dropped.Load(),
		DroppedKernel: g.kernelDrops(),
		RefusedBanned: g.refusedBanned.Load(),
		RetriesSurge:  g.retriesSurge.Load(),
		RetriesSource: g.retriesSource.Load(),
		Kicked:        g.kicked.Load(),
		Handshaking:   int(g.handshaking.Load()),
	}
	for i := range g.tab.shards {
		sh := &g.tab.shards[i]
		sh.mu.Lock()
		st.Tracked += len(sh.entries)
		st.Open += sh.open
		st.RefusedRate += sh.refusedRate
		st.RefusedMaxConns += sh.refusedMax
		st.RefusedStreams += sh.refusedStreams
		st.Overflowed += sh.overflowed
		sh.mu.Unlock()
	}
	return st
}

// addrOf returns the unmapped IP address of a UDP or TCP address.
func addrOf(addr net.Addr) (netip.Addr, bool) {
	var ip net.IP
	switch a := addr.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	default:
		if addr == nil {
			return netip.Addr{}, false
		}
		ap, err := netip.ParseAddrPort(addr.String())
		return ap.Addr().Unmap(), err == nil
	}
	a, ok := netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}

// unmapPrefix turns a prefix of IPv4-mapped addresses into the IPv4 prefix.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// window estimates events per second with a sliding one-second window: the previous
// second's count weighted by the part of it still inside the window, plus the current
// second's count.
type window struct {
	mu        sync.Mutex
	started   bool
	start     int64 // instant the current second began
	cur, prev float64
}

func (w *window) hit(t int64) float64 {
	const second = int64(time.Second)
	w.mu.Lock()
	if !w.started {
		w.started, w.start = true, t
	}
	if d := t - w.start; d >= second {
		w.prev = 0
		if d < 2*second {
			w.prev = w.cur
		}
		w.cur = 0
		w.start = t - d%second
	}
	w.cur++
	frac := min(max(float64(t-w.start)/float64(second), 0), 1)
	rate := w.prev*(1-frac) + w.cur
	w.mu.Unlock()
	return rate
}
