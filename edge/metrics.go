package edge

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/limiter"
	"github.com/h3edge/h3edge/quicconn"
)

// The metrics of DESIGN.md §7. Counters that the edge bumps itself live in plain atomic
// arrays indexed by label (protocol, status code, reason), so the request path does no
// label lookup; a collector turns them into samples at scrape time, together with what
// it reads from the limiter's policies, the transport guard, the store and the penalty
// box. No metric carries a per-client label.

const metricsNamespace = "h3edge"

// Request protocols, as the proto label spells them.
const (
	protoH1 = iota
	protoH2
	protoH3
	numProtos
)

var protoNames = [numProtos]string{"h1", "h2", "h3"}

// protoIndex maps a request's ProtoMajor to its protocol.
func protoIndex(major int) int {
	switch major {
	case 3:
		return protoH3
	case 2:
		return protoH2
	}
	return protoH1
}

// Status codes counted without a lookup: 100 to 599. Others (net/http allows up to
// 999) take a mutex.
const (
	minCode  = 100
	maxCode  = 599
	numCodes = maxCode - minCode + 1
)

var codeNames = func() (n [numCodes]string) {
	for i := range n {
		n[i] = strconv.Itoa(minCode + i)
	}
	return n
}()

// refuseReason is why a connection or a stream was refused (the reason label).
type refuseReason int

const (
	reasonBanned   refuseReason = iota // the source is in the penalty box
	reasonRate                         // over the source's connection or stream budget
	reasonMaxConns                     // the source holds max_connections already
	reasonOther                        // any other refusal
	numReasons
)

var reasonNames = [numReasons]string{"banned", "rate", "max_connections", "other"}

// reasonOf classifies an error of quicconn.Guard's ConnContext.
func reasonOf(err error) refuseReason {
	switch {
	case errors.Is(err, quicconn.ErrBanned):
		return reasonBanned
	case errors.Is(err, quicconn.ErrRate):
		return reasonRate
	case errors.Is(err, quicconn.ErrMaxConns):
		return reasonMaxConns
	}
	return reasonOther
}

// Results of ratelimit_decisions_total.
const (
	resultAllowed      = "allowed"       // admitted and charged
	resultDenied       = "denied"        // this enforced policy denied the request
	resultShadowDenied = "shadow_denied" // this shadow policy would have denied it
	resultVetoed       = "vetoed"        // this policy admitted it, another denied it: not charged
	resultFailedOpen   = "failed_open"   // the store failed; admitted by on_store_failure
	resultFailedClosed = "failed_closed" // the store failed; denied by on_store_failure
)

// Buckets, in seconds. Requests include the origin's time; store round trips are
// budgeted at redis.timeout (10ms by default).
var (
	requestBuckets = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	storeBuckets   = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
)

// metrics is the edge's instrumentation: the counters of DESIGN.md §7, a collector
// reading the limiter, the transport guard and the store at scrape time, and the
// heavy-hitter sketches behind /api/v1/top. Make it with newMetrics. It is safe for
// concurrent use. What runs per request or per connection allocates nothing; the hooks
// other code calls (observeKey, connContext, refusedStream, observeStore, storeFailed)
// are nil-safe, so a Server built without metrics still runs.
type metrics struct {
	s   *Server
	top *heavyHitters
	// bans is the penalty box (boxBans, set by New), read at scrape time for
	// bans_active and bans_total; nil reads as 0.
	bans banList
	// breaker reports whether the shared store's circuit breaker is open (decisions
	// follow on_store_failure without asking Redis), for store_breaker_open, /readyz
	// and the dashboard. Nil without Redis. Set both before serving.
	breaker func() bool

	requests   [numProtos][numCodes]atomic.Uint64
	duration   [numProtos]latencyHist
	epoch      time.Time // durations are measured as monotonic offsets from it
	refusedH3  [numReasons]atomic.Uint64
	refusedStr [numProtos][numReasons]atomic.Uint64

	storeDuration prometheus.Histogram
	storeErrs     atomic.Uint64

	descs struct {
		requests, duration, decisions, dropped, refusedCon, refusedStr, storeErrors, breaker,
		bansActive, bansTotal, inflight, tracked *prometheus.Desc
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

// newMetrics registers the edge's metrics on reg. s supplies what is read at scrape
// time: the current rules, the transport guard, the store and the in-flight count.
func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
		s:          s,
		epoch:      time.Now(),
		top:        newHeavyHitters(),
		otherCodes: map[[2]int]uint64{},
		carried:    map[policyID]*carriedStats{},
		failed:     map[string]*[2]uint64{},
	}
	name := func(n string) string { return prometheus.BuildFQName(metricsNamespace, "", n) }
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

	d.duration = prometheus.NewDesc(name("request_duration_seconds"),
		"Time from a request reaching the edge's handler to its response ending (streamed bodies included), by protocol.",
		[]string{"proto"}, nil)
	m.storeDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricsNamespace,
		Name:      "store_request_duration_seconds",
		Help:      "Round trips to the shared store (Redis), successful or not. Empty without Redis.",
		Buckets:   storeBuckets,
	})
	for _, c := range []prometheus.Collector{m, m.storeDuration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// newRegistry returns a registry with the Go runtime and process collectors, for the
// edge's metrics to join.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// instrument counts each request by protocol and status code and observes its
// duration; it also feeds the source heavy-hitter sketch. It allocates nothing: the
// response recorder is pooled and every label is resolved in advance.
func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request's one clock read: the middleware after this one takes its
		// instant from the recorder (requestTime) instead of reading the clock again.
		now := time.Now()
		start := now.Sub(m.epoch)
		rec := statusRecorderPool.Get().(*statusRecorder)
		rec.ResponseWriter, rec.code, rec.now, rec.refused = w, 0, now, false
		defer m.record(rec, protoIndex(r.ProtoMajor), start)
		if m.top.sources.sampled() {
			rs := m.s.rules.Load()
			m.top.sources.observe(rs.sources.Prefix(clientAddr(r, rs.trusted)))
		}
		next.ServeHTTP(rec, r)
	})
}

// record counts a finished request and returns its recorder to the pool. Deferred, it
// also counts a request whose handler panicked (http.ErrAbortHandler).
func (m *metrics) record(rec *statusRecorder, p int, start time.Duration) {
	if rec.refused {
		// Refused by the stream budget: counted in refused_streams_total only.
		rec.ResponseWriter = nil
		statusRecorderPool.Put(rec)
		return
	}
	code := rec.code
	if code == 0 {
		code = http.StatusOK // net/http's answer when the handler wrote nothing
	}
	if code >= minCode && code <= maxCode {
		m.requests[p][code-minCode].Add(1)
	} else {
		m.mu.Lock()
		m.otherCodes[[2]int{p, code}]++
		m.mu.Unlock()
	}
	m.duration[p].observe(time.Since(m.epoch) - start)
	rec.ResponseWriter = nil
	statusRecorderPool.Put(rec)
}

// latencyHist is a histogram of request durations with the buckets requestBuckets. It
// counts with integer atomics only — client_golang's histogram adds the float sum in a
// compare-and-swap loop, which contended cores retry — and is exposed as a constant
// histogram at scrape time.
type latencyHist struct {
	counts [len(requestBuckets) + 1]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Int64                           // nanoseconds
}

// latencyBounds are requestBuckets in nanoseconds.
var latencyBounds = func() (b [len(requestBuckets)]time.Duration) {
	for i, s := range requestBuckets {
		b[i] = time.Duration(s * float64(time.Second))
	}
	return b
}()

// observe counts one request that took d.
func (l *latencyHist) observe(d time.Duration) {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	l.counts[i].Add(1)
	l.sum.Add(int64(d))
}

// collect sends the histogram as one sample with labels. Buckets and sum are read one
// after the other, so under load they may be a few requests apart.
func (l *latencyHist) collect(ch chan<- prometheus.Metric, desc *prometheus.Desc, labels ...string) {
	buckets := make(map[float64]uint64, len(requestBuckets))
	var n uint64
	for i := range l.counts {
		n += l.counts[i].Load()
		if i < len(requestBuckets) {
			buckets[requestBuckets[i]] = n
		}
	}
	ch <- prometheus.MustNewConstHistogram(desc, n, time.Duration(l.sum.Load()).Seconds(), buckets, labels...)
}

// statusRecorder notes the status code of a response. It keeps what handlers further in
// reach for: Flush, http.ResponseController (through Unwrap: deadlines, Hijack for
// upgrades, full duplex) and, on HTTP/3, the stream.
type statusRecorder struct {
	http.ResponseWriter
	code    int
	now     time.Time // when the request reached the edge's handler
	refused bool      // refused by the stream budget: not a request answered
}

// requestTime is the instant instrument took for w's request, so the rest of the
// chain reads the clock once per request; without instrument it reads the clock.
func requestTime(w http.ResponseWriter) time.Time {
	if rec, ok := w.(*statusRecorder); ok {
		return rec.now
	}
	return time.Now()
}

// markRefused tells instrument that the stream budget refused w's request.
func markRefused(w http.ResponseWriter) {
	if rec, ok := w.(*statusRecorder); ok {
		rec.refused = true
	}
}

var statusRecorderPool = sync.Pool{New: func() any { return new(statusRecorder) }}

// WriteHeader notes the first final status and passes it on.
func (r *statusRecorder) WriteHeader(code int) {
	// Informational answers (103 Early Hints) precede the final one; 101 is final.
	if r.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write notes an implicit 200 and passes b on.
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush sends what is buffered (server-sent events, streamed proxying).
func (r *statusRecorder) Flush() {
	r.FlushError()
}

// FlushError is Flush reporting failure, which http.ResponseController prefers.
func (r *statusRecorder) FlushError() error {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the protocol's own writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// errNoHTTPStream answers HTTPStream on HTTP/1.1 and HTTP/2.
var errNoHTTPStream = errors.New("edge: not an HTTP/3 request")

// HTTPStream is http3.HTTPStreamer: the request's QUIC stream, on HTTP/3 only.
func (r *statusRecorder) HTTPStream() (*http3.Stream, error) {
	if s, ok := r.ResponseWriter.(http3.HTTPStreamer); ok {
		return s.HTTPStream()
	}
	return nil, errNoHTTPStream
}

// observeKey feeds the client-key heavy-hitter sketch; call it once per request that
// matched a policy, with the key of its first policy.
func (m *metrics) observeKey(k limiter.Key) {
	if m != nil && m.top.keys.sampled() {
		m.top.keys.observe(k)
	}
}

// connContext wraps quic.Transport.ConnContext (the guard's) to count the connections
// it refuses, by reason.
func (m *metrics) connContext(next func(context.Context, *quic.ClientInfo) (context.Context, error)) func(context.Context, *quic.ClientInfo) (context.Context, error) {
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

// refusedStream counts a request stream refused before the chain: major is the
// request's ProtoMajor, reason reasonRate (stream budget) or reasonBanned.
func (m *metrics) refusedStream(major int, reason refuseReason) {
	if m != nil {
		m.refusedStr[protoIndex(major)][reason].Add(1)
	}
}

// observeStore records one round trip to the shared store. The Redis store calls it
// (a hook in its configuration) so that limiter/redisstore needs no Prometheus.
func (m *metrics) observeStore(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.storeDuration.Observe(d.Seconds())
	if err != nil {
		m.storeErrs.Add(1)
	}
}

// storeFailed counts a decision of policy taken by on_store_failure: admitted (open)
// or refused.
func (m *metrics) storeFailed(policy string, open bool) {
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

// run ages the heavy-hitter sketches until done is closed: every topHalfLife the
// counts halve, so /api/v1/top shows who is heavy now rather than since start.
func (m *metrics) run(done <-chan struct{}) {
	t := time.NewTicker(topHalfLife)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			m.top.keys.decay()
			m.top.sources.decay()
		case <-done:
			return
		}
	}
}

// topHalfLife is how fast old traffic fades from the heavy-hitter counts.
const topHalfLife = 30 * time.Second

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	d := &m.descs
	for _, x := range []*prometheus.Desc{d.requests, d.duration, d.decisions, d.dropped, d.refusedCon, d.refusedStr,
		d.storeErrors, d.breaker, d.bansActive, d.bansTotal, d.inflight, d.tracked} {
		ch <- x
	}
}

// Collect implements prometheus.Collector: it reads every source now.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
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
		if row.Shadow {
			denied = resultShadowDenied
		}
		counter(d.decisions, row.Allowed, row.Policy, resultAllowed)
		counter(d.decisions, row.Denied, row.Policy, denied)
		counter(d.decisions, row.Vetoed, row.Policy, resultVetoed)
		counter(d.decisions, row.FailedOpen, row.Policy, resultFailedOpen)
		counter(d.decisions, row.FailedClosed, row.Policy, resultFailedClosed)
		if row.Held != nil {
			gauge(d.inflight, float64(*row.Held), row.Policy)
		}
	}

	t := m.transport()
	counter(d.dropped, t.DroppedBanned, "banned")
	if t.DroppedKernel > 0 { // appears with the first kernel drop, like the codes of requests_total
		counter(d.dropped, t.DroppedKernel, "kernel")
	}
	for _, c := range m.refusedConns() {
		counter(d.refusedCon, c.n, c.proto, reasonNames[c.reason])
	}
	for p := range m.refusedStr {
		counter(d.refusedStr, m.refusedStr[p][reasonRate].Load(), protoNames[p], reasonNames[reasonRate])
		for _, r := range []refuseReason{reasonBanned, reasonMaxConns, reasonOther} {
			if v := m.refusedStr[p][r].Load(); v > 0 {
				counter(d.refusedStr, v, protoNames[p], reasonNames[r])
			}
		}
	}
	gauge(d.tracked, float64(t.Tracked))
	counter(d.storeErrors, m.storeErrs.Load())

	var open float64
	if m.breakerOpen() {
		open = 1
	}
	gauge(d.breaker, open)

	active, total := m.banCounts()
	gauge(d.bansActive, float64(active))
	counter(d.bansTotal, total)
	gauge(d.inflight, float64(m.s.inflight.Load()), "")
}

// decisionRow is one policy's decisions, as ratelimit_decisions_total and
// /api/v1/stats report them.
type decisionRow struct {
	Policy       string `json:"policy"`
	Shadow       bool   `json:"shadow"`
	Allowed      uint64 `json:"allowed"`
	Denied       uint64 `json:"denied"` // shadow_denied for a shadow policy
	Vetoed       uint64 `json:"vetoed"`
	FailedOpen   uint64 `json:"failed_open"`
	FailedClosed uint64 `json:"failed_closed"`
	// Held is the units held now, for concurrency policies that report it.
	Held *int64 `json:"held,omitempty"`
}

// decisions reads the counters of the current policies, carrying the counts of
// policies a reload replaced (see metrics.carried).
func (m *metrics) decisions() []decisionRow {
	rs := m.s.rules.Load()
	if rs == nil {
		return nil
	}
	rows := make([]decisionRow, 0, len(rs.policies))
	m.mu.Lock()
	defer m.mu.Unlock()
	live := make(map[policyID]bool, len(rs.policies))
	for _, r := range rs.policies {
		id := policyID{r.name, r.shadow}
		live[id] = true
		c := m.carried[id]
		switch {
		case c == nil:
			c = &carriedStats{lim: r.lim}
			m.carried[id] = c
		case c.lim != r.lim:
			// Replaced since the last read: what the old policy counted stays counted.
			old := c.lim.Stats()
			c.base.Allowed += old.Allowed
			c.base.Denied += old.Denied
			c.base.Vetoed += old.Vetoed
			c.lim = r.lim
		}
		st := r.lim.Stats()
		row := decisionRow{
			Policy:  r.name,
			Shadow:  r.shadow,
			Allowed: c.base.Allowed + st.Allowed,
			Denied:  c.base.Denied + st.Denied,
			Vetoed:  c.base.Vetoed + st.Vetoed,
		}
		if f := m.failed[r.name]; f != nil {
			row.FailedOpen, row.FailedClosed = f[0], f[1]
		}
		if r.lim.Algorithm == limiter.Concurrency {
			n := m.s.held.get(id)
			row.Held = &n
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
	reason refuseReason
	n      uint64
}

// refusedConns lists the connection refusals: QUIC ones counted by connContext, TCP
// ones by the server's guarded listener. "other" appears only once it happened.
func (m *metrics) refusedConns() []refusedConn {
	out := make([]refusedConn, 0, 7)
	for r := range reasonOther {
		out = append(out, refusedConn{"h3", r, m.refusedH3[r].Load()})
	}
	if v := m.refusedH3[reasonOther].Load(); v > 0 {
		out = append(out, refusedConn{"h3", reasonOther, v})
	}
	t := &m.s.refusedTCP
	return append(out,
		refusedConn{"tcp", reasonBanned, t.banned.Load()},
		refusedConn{"tcp", reasonRate, t.rate.Load()},
		refusedConn{"tcp", reasonMaxConns, t.maxConns.Load()})
}

// transport reads the guard's state; zero without a guard.
func (m *metrics) transport() quicconn.Stats {
	if g := m.s.guard; g != nil {
		return g.Stats()
	}
	return quicconn.Stats{}
}

// breakerOpen reports the store's breaker state; false without a shared store.
func (m *metrics) breakerOpen() bool {
	return m.breaker != nil && m.breaker()
}

// banCounts reads the penalty box: bans in force, and bans imposed since start when
// the box counts them.
func (m *metrics) banCounts() (active int, total uint64) {
	if m.bans == nil {
		return 0, 0
	}
	if c, ok := m.bans.(banCounter); ok {
		return c.Counts()
	}
	return len(m.bans.List(time.Now())), 0
}
