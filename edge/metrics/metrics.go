// Package metrics is the edge's instrumentation, the metrics of DESIGN.md §7: the
// middleware that counts each request and times it (Instrument, with the Recorder it
// wraps responses in), the hooks other rooms call on rare events (refused connections
// and streams, store round trips, on_store_failure decisions), the responses of each
// route and the upstream pools' series, and a collector that reads, at scrape time,
// what the edge's other parts count themselves — the policies' decisions, the transport
// guard, the penalty box, the in-flight requests.
//
// Counters bumped per request live in plain atomic arrays indexed by label (protocol,
// status code, reason), so the request path does no label lookup and allocates nothing.
// No metric carries a per-client label. The package knows the edge only through
// Config's hooks, and registers on the prometheus.Registerer it is given.
package metrics

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/quic-go/quic-go"

	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/admission"
	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/edge/upstream"
	"github.com/h3edge/h3edge/limiter"
	"github.com/h3edge/h3edge/limiter/penalty"
	"github.com/h3edge/h3edge/quicconn"
)

// Config says where a Metrics reads what it does not count itself. The hooks are
// called at scrape time, from the scraping goroutine, except Source, which Instrument
// calls for the requests Top samples. A nil hook reads as zero (or as none).
type Config struct {
	// Rules returns the rule set in force; ratelimit_decisions_total reports its
	// policies' counters.
	Rules func() *rules.Set
	// Held returns the units of a concurrency policy held now (inflight{policy}).
	Held func(policy string, shadow bool) int64
	// Transport returns the transport guard's state: dropped datagrams, tracked
	// sources.
	Transport func() quicconn.Stats
	// TCPRefused returns the TCP connections reset at accept.
	TCPRefused func() admission.Refused
	// Bans returns the penalty box's counts (bans_active, bans_total).
	Bans func() penalty.Stats
	// Breaker reports whether the shared store's circuit breaker is open.
	Breaker func() bool
	// Inflight returns the requests being handled now, on all protocols.
	Inflight func() int64
	// AccessDropped returns the access log lines dropped so far.
	AccessDropped func() uint64
	// Pools returns the upstream pools in force, for the upstream_* series.
	Pools func() []*upstream.Pool

	// Top is the heavy-hitter sketch behind /api/v1/top. If nil, Instrument feeds no
	// sketch and ObserveKey does nothing.
	Top *admin.Top
	// Source returns the source prefix r's client is counted under, for Top's source
	// sketch. It is called only when Top samples the request; required with Top.
	Source func(r *http.Request) netip.Prefix
}

// Metrics counts what the edge does and exposes it to Prometheus. Make it with New. It
// is safe for concurrent use. Its methods that run per request or per connection
// allocate nothing. Instrument and the hooks the rest of the edge calls (ObserveKey,
// ConnContext, RefusedStream, ObserveStore, StoreFailed, CountRoute) may be called on a
// nil *Metrics, which counts nothing, so that an edge built without metrics still runs.
type Metrics struct {
	cfg Config

	requests   [numProtos][numCodes]atomic.Uint64
	duration   [numProtos]latencyHist
	epoch      time.Time // durations are measured as monotonic offsets from it
	refusedH3  [numReasons]atomic.Uint64
	refusedStr [numProtos][numReasons]atomic.Uint64
	routes     sync.Map // route name → *routeCounts

	storeDuration prometheus.Histogram
	storeErrs     atomic.Uint64

	descs struct {
		requests, duration, decisions, dropped, refusedCon, refusedStr, storeErrors, breaker,
		bansActive, bansTotal, inflight, tracked, accessDropped *prometheus.Desc
	}

	// mu guards the maps below, touched at scrape time and on rare events.
	mu sync.Mutex
	// otherCodes counts responses with a status outside 100–599, by protocol and code.
	otherCodes map[[2]int]uint64
	// carried keeps ratelimit_decisions_total monotonic across reloads: when a reload
	// replaces a policy's limiter.Policy (its parameters changed), the old one's
	// counts are carried into the new one's series. Keyed by name and mode.
	carried map[policyID]*carriedStats
	// failed counts decisions taken by on_store_failure, by policy name.
	failed map[string]*[2]uint64 // [0] open, [1] closed
}

// policyID names a policy's series across reloads.
type policyID struct {
	name   string
	shadow bool
}

// carriedStats is the limiter.Policy a policy's series was last read from, and the
// counts of the ones it replaced.
type carriedStats struct {
	lim  *limiter.Policy
	base limiter.Stats
}

// NewRegistry returns a registry with the Go runtime and process collectors, for the
// edge's metrics to join.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// New registers the edge's metrics on reg, reading through c's hooks at scrape time.
func New(reg prometheus.Registerer, c Config) (*Metrics, error) {
	m := &Metrics{
		cfg:        c,
		epoch:      time.Now(),
		otherCodes: map[[2]int]uint64{},
		carried:    map[policyID]*carriedStats{},
		failed:     map[string]*[2]uint64{},
	}
	d := &m.descs
	d.requests = prometheus.NewDesc(name("requests_total"),
		"Requests answered, by protocol (h1, h2, h3) and status code, including answers of the edge itself (429, 425, 431, 502…). Requests refused by the per-source stream budget are in refused_streams_total instead.",
		[]string{"proto", "code"}, nil)
	d.decisions = prometheus.NewDesc(name("ratelimit_decisions_total"),
		"Rate-limit decisions by policy and result: allowed; denied (this enforced policy denied); shadow_denied (this shadow policy would have denied); vetoed (this policy admitted, another in the same request denied, nothing charged); failed_open and failed_closed (the store failed and on_store_failure decided).",
		[]string{"policy", "result"}, nil)
	d.dropped = prometheus.NewDesc(name("dropped_datagrams_total"),
		"UDP datagrams dropped before QUIC parsed them, by reason (banned: the source is in the penalty box, dropped by the edge; kernel: dropped by the kernel on the edge's UDP socket — a banned source caught by the kernel's ban filter, or a full receive buffer, counted together by the kernel).",
		[]string{"reason"}, nil)
	d.refusedCon = prometheus.NewDesc(name("refused_connections_total"),
		"Connections refused before any TLS work, by transport (h3: QUIC Initial packets answered with CONNECTION_REFUSED, a first flight may span two; tcp: accepted TCP connections closed with a reset) and reason (banned, rate, max_connections).",
		[]string{"proto", "reason"}, nil)
	d.refusedStr = prometheus.NewDesc(name("refused_streams_total"),
		"Request streams refused by the per-source stream budget before any policy ran, by protocol (h3: reset with H3_REQUEST_REJECTED; h1, h2: prebuilt 429) and reason.",
		[]string{"proto", "reason"}, nil)
	d.storeErrors = prometheus.NewDesc(name("store_errors_total"),
		"Round trips to the shared store that failed (error or timeout). 0 without Redis.",
		nil, nil)
	d.breaker = prometheus.NewDesc(name("store_breaker_open"),
		"1 while the shared store's circuit breaker is open (decisions follow on_store_failure), else 0; always 0 without Redis.",
		nil, nil)
	d.bansActive = prometheus.NewDesc(name("bans_active"),
		"Source prefixes in the penalty box now.", nil, nil)
	d.bansTotal = prometheus.NewDesc(name("bans_total"),
		"Bans imposed since start, by abuse detection or through the admin API.", nil, nil)
	d.inflight = prometheus.NewDesc(name("inflight"),
		`In flight now. Without a policy label (policy=""): requests being handled by this edge, all protocols. With policy="NAME": units of that concurrency policy held by this edge.`,
		[]string{"policy"}, nil)
	d.tracked = prometheus.NewDesc(name("tracked_sources"),
		"Source prefixes with per-source transport state (connection and stream budgets), at most ip.max_tracked.",
		nil, nil)

	d.accessDropped = prometheus.NewDesc(name("access_log_dropped_total"),
		"Access log lines dropped rather than hold a request up: the log's buffer was full, or writing to its file failed.",
		nil, nil)
	d.duration = prometheus.NewDesc(name("request_duration_seconds"),
		"Time from a request reaching the edge's handler to its response ending (streamed bodies included), by protocol.",
		[]string{"proto"}, nil)
	m.storeDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace,
		Name:      "store_request_duration_seconds",
		Help:      "Round trips to the shared store (Redis), successful or not. Empty without Redis.",
		Buckets:   storeBuckets,
	})
	for _, col := range []prometheus.Collector{m, m.storeDuration, newUpstreams(m)} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// name is the full name of the edge's metric n.
func name(n string) string { return prometheus.BuildFQName(Namespace, "", n) }

// Instrument counts each request by protocol and status code and observes its
// duration; it also feeds Top's source sketch. It reads the clock once and hands that
// instant to next, so the rest of the chain decides at the same instant without
// reading the clock again; next's ResponseWriter is a *Recorder. It allocates nothing:
// the recorder is pooled and every label is resolved in advance.
func (m *Metrics) Instrument(next func(w http.ResponseWriter, r *http.Request, now time.Time)) http.Handler {
	if m == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next(w, r, time.Now()) })
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		start := now.Sub(m.epoch)
		rec := recorderPool.Get().(*Recorder)
		rec.ResponseWriter, rec.code, rec.bytes, rec.refused, rec.hijacked = w, 0, 0, false, nil
		defer m.record(rec, ProtoOf(r.ProtoMajor), start)
		if top := m.cfg.Top; top != nil && top.SourceSampled() {
			top.ObserveSource(m.cfg.Source(r))
		}
		next(rec, r, now)
	})
}

// record counts a finished request and returns its recorder to the pool. Deferred, it
// also counts a request whose handler panicked (http.ErrAbortHandler).
func (m *Metrics) record(rec *Recorder, p Proto, start time.Duration) {
	if !rec.refused { // else refused by the stream budget: counted in refused_streams_total only
		if code := rec.Status(); code >= minCode && code <= maxCode {
			m.requests[p][code-minCode].Add(1)
		} else {
			m.mu.Lock()
			m.otherCodes[[2]int{int(p), code}]++
			m.mu.Unlock()
		}
		m.duration[p].observe(time.Since(m.epoch) - start)
	}
	rec.ResponseWriter = nil
	recorderPool.Put(rec)
}

// ObserveKey feeds Top's client-key sketch; call it once per request that matched a
// policy, with the key of its first policy.
func (m *Metrics) ObserveKey(k limiter.Key) {
	if m != nil && m.cfg.Top != nil {
		m.cfg.Top.ObserveKey(k)
	}
}

// ConnContext wraps quic.Transport.ConnContext (the guard's) to count the connections
// it refuses, by reason.
func (m *Metrics) ConnContext(next func(context.Context, *quic.ClientInfo) (context.Context, error)) func(context.Context, *quic.ClientInfo) (context.Context, error) {
	if m == nil {
		return next
	}
	return func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
		c, err := next(ctx, info)
		if err != nil {
			m.refusedH3[reasonOf(err)].Add(1)
		}
		return c, err
	}
}

// RefusedStream counts a request stream refused before any policy ran: major is the
// request's ProtoMajor, reason Rate (the stream budget) or Banned.
func (m *Metrics) RefusedStream(major int, reason Reason) {
	if m != nil {
		m.refusedStr[ProtoOf(major)][reason].Add(1)
	}
}

// ObserveStore records one round trip to the shared store. The Redis store calls it
// (a hook in its configuration) so that limiter/redisstore needs no Prometheus.
func (m *Metrics) ObserveStore(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.storeDuration.Observe(d.Seconds())
	if err != nil {
		m.storeErrs.Add(1)
	}
}

// StoreFailed counts a decision of policy taken by on_store_failure: admitted (open)
// or refused.
func (m *Metrics) StoreFailed(policy string, open bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	f := m.failed[policy]
	if f == nil {
		f = new([2]uint64)
		m.failed[policy] = f
	}
	if open {
		f[0]++
	} else {
		f[1]++
	}
	m.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	d := &m.descs
	for _, x := range []*prometheus.Desc{d.requests, d.duration, d.decisions, d.dropped, d.refusedCon, d.refusedStr,
		d.storeErrors, d.breaker, d.bansActive, d.bansTotal, d.inflight, d.tracked, d.accessDropped} {
		ch <- x
	}
}

// Collect implements prometheus.Collector: it reads every source now.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	d := &m.descs
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}

	for p := range m.requests {
		for c := range m.requests[p] {
			if v := m.requests[p][c].Load(); v > 0 {
				counter(d.requests, v, protoNames[p], codeNames[c])
			}
		}
	}
	for p := range m.duration {
		m.duration[p].collect(ch, d.duration, protoNames[p])
	}
	m.mu.Lock()
	for k, v := range m.otherCodes {
		counter(d.requests, v, protoNames[k[0]], strconv.Itoa(k[1]))
	}
	m.mu.Unlock()

	for _, row := range m.decisions() {
		denied := resultDenied
		if row.shadow {
			denied = resultShadowDenied
		}
		counter(d.decisions, row.allowed, row.policy, resultAllowed)
		counter(d.decisions, row.denied, row.policy, denied)
		counter(d.decisions, row.vetoed, row.policy, resultVetoed)
		counter(d.decisions, row.failedOpen, row.policy, resultFailedOpen)
		counter(d.decisions, row.failedClosed, row.policy, resultFailedClosed)
		if row.held != nil {
			gauge(d.inflight, float64(*row.held), row.policy)
		}
	}

	var t quicconn.Stats
	if f := m.cfg.Transport; f != nil {
		t = f()
	}
	counter(d.dropped, t.DroppedBanned, "banned")
	if t.DroppedKernel > 0 { // appears with the first kernel drop, like the codes of requests_total
		counter(d.dropped, t.DroppedKernel, "kernel")
	}
	for _, c := range m.refusedConns() {
		counter(d.refusedCon, c.n, c.proto, reasonNames[c.reason])
	}
	for p := range m.refusedStr {
		counter(d.refusedStr, m.refusedStr[p][Rate].Load(), protoNames[p], reasonNames[Rate])
		for _, r := range []Reason{Banned, MaxConns, Other} {
			if v := m.refusedStr[p][r].Load(); v > 0 {
				counter(d.refusedStr, v, protoNames[p], reasonNames[r])
			}
		}
	}
	gauge(d.tracked, float64(t.Tracked))
	counter(d.storeErrors, m.storeErrs.Load())

	var open float64
	if f := m.cfg.Breaker; f != nil && f() {
		open = 1
	}
	gauge(d.breaker, open)

	var bans penalty.Stats
	if f := m.cfg.Bans; f != nil {
		bans = f()
	}
	gauge(d.bansActive, float64(bans.Active))
	counter(d.bansTotal, bans.Total)
	var inflight int64
	if f := m.cfg.Inflight; f != nil {
		inflight = f()
	}
	gauge(d.inflight, float64(inflight), "")
	var dropped uint64
	if f := m.cfg.AccessDropped; f != nil {
		dropped = f()
	}
	counter(d.accessDropped, dropped)
}

// decisionRow is one policy's decisions, as ratelimit_decisions_total reports them.
type decisionRow struct {
	policy       string
	shadow       bool
	allowed      uint64
	denied       uint64 // shadow_denied for a shadow policy
	vetoed       uint64
	failedOpen   uint64
	failedClosed uint64
	// held is the units held now, for concurrency policies.
	held *int64
}

// decisions reads the counters of the current policies, carrying the counts of
// policies a reload replaced (see Metrics.carried).
func (m *Metrics) decisions() []decisionRow {
	if m.cfg.Rules == nil {
		return nil
	}
	rs := m.cfg.Rules()
	if rs == nil {
		return nil
	}
	rows := make([]decisionRow, 0, len(rs.Policies))
	m.mu.Lock()
	defer m.mu.Unlock()
	live := make(map[policyID]bool, len(rs.Policies))
	for _, r := range rs.Policies {
		id := policyID{r.Name, r.Mode == rules.Shadow}
		live[id] = true
		c := m.carried[id]
		switch {
		case c == nil:
			c = &carriedStats{lim: r.Limiter}
			m.carried[id] = c
		case c.lim != r.Limiter:
			// Replaced since the last read: what the old policy counted stays counted.
			old := c.lim.Stats()
			c.base.Allowed += old.Allowed
			c.base.Denied += old.Denied
			c.base.Vetoed += old.Vetoed
			c.lim = r.Limiter
		}
		st := r.Limiter.Stats()
		row := decisionRow{
			policy:  r.Name,
			shadow:  id.shadow,
			allowed: c.base.Allowed + st.Allowed,
			denied:  c.base.Denied + st.Denied,
			vetoed:  c.base.Vetoed + st.Vetoed,
		}
		if f := m.failed[r.Name]; f != nil {
			row.failedOpen, row.failedClosed = f[0], f[1]
		}
		if r.Limiter.Algorithm == limiter.Concurrency {
			var n int64
			if m.cfg.Held != nil {
				n = m.cfg.Held(id.name, id.shadow)
			}
			row.held = &n
		}
		rows = append(rows, row)
	}
	for id := range m.carried {
		if !live[id] {
			delete(m.carried, id) // a removed policy's series ends
		}
	}
	return rows
}

// refusedConn is one series of refused_connections_total.
type refusedConn struct {
	proto  string // "h3" (QUIC) or "tcp" (HTTP/1.1 or HTTP/2: ALPN has not run yet)
	reason Reason
	n      uint64
}

// refusedConns lists the connection refusals: QUIC ones counted by ConnContext, TCP
// ones by the edge's guarded listener. "other" appears only once it happened.
func (m *Metrics) refusedConns() []refusedConn {
	out := make([]refusedConn, 0, 8)
	for r := range Other {
		out = append(out, refusedConn{"h3", r, m.refusedH3[r].Load()})
	}
	if v := m.refusedH3[Other].Load(); v > 0 {
		out = append(out, refusedConn{"h3", Other, v})
	}
	var t admission.Refused
	if f := m.cfg.TCPRefused; f != nil {
		t = f()
	}
	if v := m.refusedH3[Overload].Load(); v > 0 {
		out = append(out, refusedConn{"h3", Overload, v})
	}
	out = append(out,
		refusedConn{"tcp", Banned, t.Banned},
		refusedConn{"tcp", Rate, t.Rate},
		refusedConn{"tcp", MaxConns, t.MaxConns},
		refusedConn{"tcp", Capped, t.Open + t.Pending})
	if t.Overload > 0 {
		out = append(out, refusedConn{"tcp", Overload, t.Overload})
	}
	return out
}
