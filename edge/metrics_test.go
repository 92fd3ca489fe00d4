package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/quic-go/quic-go"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/limiter/penalty"
	"github.com/h3edge/h3edge/quicconn"
)

// counterValue reads the counter family{labels} (name, value, name, value…) from s's
// registry, the one /metrics serves; 0 while the series does not exist.
func counterValue(t testing.TB, s *Server, family string, labels ...string) float64 {
	t.Helper()
	fams, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// scrape reads /metrics through the admin listener and returns every h3edge sample as
// "name{label="value",…}" → value (histograms as name_count).
func (e *opsEdge) scrape(t testing.TB) map[string]float64 {
	t.Helper()
	code, _, body := e.call(t, "GET", "/metrics", nil)
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	return parseExposition(t, body)
}

// parseExposition parses a text exposition like scrape.
func parseExposition(t testing.TB, body []byte) map[string]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the exposition: %v\n%s", err, body)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "h3edge_") {
			continue
		}
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.Counter.GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.Gauge.GetValue()
			case dto.MetricType_HISTOGRAM:
				out[strings.Replace(key, name, name+"_count", 1)] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

// zeroSeries are the series present at zero in a fresh edge without Redis, bans or
// refusals: everything but requests, decisions and what the test sets.
func zeroSeries() map[string]float64 {
	z := map[string]float64{
		`h3edge_dropped_datagrams_total{reason="banned"}`: 0,
		`h3edge_store_errors_total`:                       0,
		`h3edge_store_breaker_open`:                       0,
		`h3edge_store_request_duration_seconds_count`:     0,
		`h3edge_bans_active`:                              0,
		`h3edge_bans_total`:                               0,
		`h3edge_inflight{policy=""}`:                      0,
		`h3edge_access_log_dropped_total`:                 0,
	}
	for _, proto := range []string{"h3", "tcp"} {
		for _, r := range []string{"banned", "rate", "max_connections"} {
			z[fmt.Sprintf(`h3edge_refused_connections_total{proto=%q,reason=%q}`, proto, r)] = 0
		}
	}
	z[`h3edge_refused_connections_total{proto="tcp",reason="capped"}`] = 0
	for _, proto := range []string{"h1", "h2", "h3"} {
		z[fmt.Sprintf(`h3edge_refused_streams_total{proto=%q,reason="rate"}`, proto)] = 0
		z[fmt.Sprintf(`h3edge_request_duration_seconds_count{proto=%q}`, proto)] = 0
	}
	return z
}

// decisionSeries are the five decision series of one policy.
func decisionSeries(policy string, allowed, denied, vetoed float64, shadow bool) map[string]float64 {
	d := "denied"
	if shadow {
		d = "shadow_denied"
	}
	s := func(result string) string {
		return fmt.Sprintf(`h3edge_ratelimit_decisions_total{policy=%q,result=%q}`, policy, result)
	}
	return map[string]float64{s("allowed"): allowed, s(d): denied, s("vetoed"): vetoed, s("failed_open"): 0, s("failed_closed"): 0}
}

// compareSeries reports every series missing, unexpected or off.
func compareSeries(t testing.TB, got, want map[string]float64) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("missing %s (want %v)", k, w)
		case !wok:
			t.Errorf("unexpected %s = %v", k, g)
		case g != w:
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
}

// TestMetricsExact sends a scripted mix over the three protocols — allowed, denied and
// shadow-denied requests — and checks every h3edge series of /metrics, parsed with
// expfmt, against its exact value.
func TestMetricsExact(t *testing.T) {
	e := startOps(t, withPolicies(
		config.Policy{Name: "burst", Quota: 3, Window: time.Minute},
		config.Policy{Name: "watch", Quota: 2, Window: time.Minute, Mode: "shadow"},
	), "metrics-token", nil)
	status := map[string][]int{}
	for _, step := range []struct {
		proto string
		n     int
	}{{"h1", 3}, {"h2", 1}, {"h3", 1}} {
		c := clientFor(t, step.proto)
		for range step.n {
			resp, err := c.Get(e.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status[step.proto] = append(status[step.proto], resp.StatusCode)
		}
	}
	if fmt.Sprint(status) != "map[h1:[200 200 200] h2:[429] h3:[429]]" {
		t.Fatalf("statuses: %v", status)
	}

	want := zeroSeries()
	want[`h3edge_requests_total{code="200",proto="h1"}`] = 3
	want[`h3edge_requests_total{code="429",proto="h2"}`] = 1
	want[`h3edge_requests_total{code="429",proto="h3"}`] = 1
	want[`h3edge_request_duration_seconds_count{proto="h1"}`] = 3
	want[`h3edge_request_duration_seconds_count{proto="h2"}`] = 1
	want[`h3edge_request_duration_seconds_count{proto="h3"}`] = 1
	want[`h3edge_tracked_sources`] = 1 // 127.0.0.1, its connections still open
	mergeSeries(want, decisionSeries("burst", 3, 2, 0, false))
	mergeSeries(want, decisionSeries("watch", 2, 3, 0, true))
	compareSeries(t, e.scrape(t), want)
}

// mergeSeries copies src into dst.
func mergeSeries(dst, src map[string]float64) {
	for k, v := range src {
		dst[k] = v
	}
}

// TestMetricsAcrossReload: a reload that changes a policy's parameters gives it a new
// limiter.Policy; its decision counters carry on from where they were.
func TestMetricsAcrossReload(t *testing.T) {
	var mu sync.Mutex
	var next *config.Config
	e := startOps(t, withPolicies(config.Policy{Name: "burst", Quota: 3, Window: time.Minute}), "", func() (*config.Config, error) {
		mu.Lock()
		defer mu.Unlock()
		return next, nil
	})
	c := clientFor(t, "h2")
	get := func(n int) {
		for range n {
			resp, err := c.Get(e.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	get(5)
	series := `h3edge_ratelimit_decisions_total{policy="burst",result="%s"}`
	m := e.scrape(t)
	if m[fmt.Sprintf(series, "allowed")] != 3 || m[fmt.Sprintf(series, "denied")] != 2 {
		t.Fatalf("before the reload: %v", m)
	}
	mu.Lock()
	next = opsConfig(t, withPolicies(config.Policy{Name: "burst", Quota: 10, Window: time.Minute}), "")
	mu.Unlock()
	if code, _, body := e.call(t, "POST", "/api/v1/reload", nil); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	get(2) // the new policy starts with a full bucket
	m = e.scrape(t)
	if m[fmt.Sprintf(series, "allowed")] != 5 || m[fmt.Sprintf(series, "denied")] != 2 {
		t.Errorf("after the reload: allowed %v denied %v, want 5 and 2",
			m[fmt.Sprintf(series, "allowed")], m[fmt.Sprintf(series, "denied")])
	}
}

// TestMetricsRefusals: connection refusals by transport and reason, and dropped
// datagrams, against a real guard and real sockets.
func TestMetricsRefusals(t *testing.T) {
	e := startOps(t, func(c *config.Config) { c.IP.MaxConnections = 1 }, "", nil)

	// TCP: the second connection from 127.0.0.1 is over max_connections (once the
	// start-up probe's connection is gone).
	testkit.WaitFor(t, 5*time.Second, "every QUIC connection slot released", func() bool { return e.guard.Stats().Open == 0 })
	c1, c2 := clientFor(t, "h1"), clientFor(t, "h1")
	resp, err := c1.Get(e.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) // read to the end: the connection stays open, idle
	resp.Body.Close()
	if _, err := c2.Get(e.url + "/"); err == nil {
		t.Fatal("a second TCP connection was admitted")
	}

	// QUIC: the transport's ConnContext as Serve wired it (the guard's, counted), called
	// as quic-go calls it for a new connection.
	cc := e.quicConnContext(t)
	info := &quic.ClientInfo{RemoteAddr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4433}}
	if _, err := cc(context.Background(), info); !errors.Is(err, quicconn.ErrMaxConns) {
		t.Fatalf("ConnContext: %v, want ErrMaxConns", err)
	}
	other := &quic.ClientInfo{RemoteAddr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 4433}}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := cc(ctx, other); err != nil {
		t.Fatalf("ConnContext for a new source: %v", err)
	}
	cancel()
	// A banned source, banned in the penalty box through the admin API. The box holds
	// quicconn.MaxKernelIPv4 broader bans first, which fill the kernel ban filter: the
	// source's /32 is left to the user-space filter, whose drops are reason="banned".
	now := time.Now()
	for i := range quicconn.MaxKernelIPv4 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18 + byte(i>>8), byte(i), 0}), 24)
		if err := e.box.Add(penalty.Ban{Prefix: p, Until: now.Add(10 * time.Minute), Reason: "filler"}); err != nil {
			t.Fatal(err)
		}
	}
	banned := net.IPv4(127, 0, 0, 30)
	if code, _, body := e.call(t, "POST", "/api/v1/bans", strings.NewReader(`{"prefix":"127.0.0.30"}`),
		"Content-Type", "application/json"); code != 201 {
		t.Fatalf("banning 127.0.0.30: %d %s", code, body)
	}
	if _, err := cc(context.Background(), &quic.ClientInfo{RemoteAddr: &net.UDPAddr{IP: banned, Port: 4433}}); !errors.Is(err, quicconn.ErrBanned) {
		t.Fatalf("ConnContext for a banned source: %v, want ErrBanned", err)
	}

	got := e.scrape(t)
	for series, want := range map[string]float64{
		`h3edge_refused_connections_total{proto="tcp",reason="max_connections"}`: 1,
		`h3edge_refused_connections_total{proto="h3",reason="max_connections"}`:  1,
		`h3edge_refused_connections_total{proto="h3",reason="banned"}`:           1,
		`h3edge_refused_connections_total{proto="h3",reason="rate"}`:             0,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}

	// Dropped datagrams: the banned source sends datagrams to the edge's UDP socket,
	// which its QUIC transport reads through the guard.
	const sent = 3
	droppedBanned := `h3edge_dropped_datagrams_total{reason="banned"}`
	droppedKernel := `h3edge_dropped_datagrams_total{reason="kernel"}`
	before := got[droppedBanned]
	sender, err := net.DialUDP("udp", &net.UDPAddr{IP: banned}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: e.port})
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	for range sent {
		if _, err := sender.Write([]byte("initial?")); err != nil {
			t.Fatal(err)
		}
	}
	var m map[string]float64
	testkit.WaitFor(t, 5*time.Second, "the datagrams counted as dropped", func() bool {
		m = e.scrape(t)
		return m[droppedBanned]-before+m[droppedKernel] >= sent
	})
	if d := m[droppedBanned] - before; d != sent || m[droppedKernel] != 0 {
		t.Errorf("dropped_datagrams_total{reason=banned} rose by %v, {reason=kernel} is %v; want %d and 0", d, m[droppedKernel], sent)
	}
}

// quicConnContext is the ConnContext of e's QUIC transport, once Serve has made it.
func (e *opsEdge) quicConnContext(t testing.TB) func(context.Context, *quic.ClientInfo) (context.Context, error) {
	t.Helper()
	var cc func(context.Context, *quic.ClientInfo) (context.Context, error)
	testkit.WaitFor(t, 5*time.Second, "the QUIC transport", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.quicTr != nil {
			cc = e.quicTr.ConnContext
		}
		return cc != nil
	})
	return cc
}

// TestMetricsStoreAndBans: the store hooks and the penalty box's counts.
func TestMetricsStoreAndBans(t *testing.T) {
	e := startOps(t, withPolicies(config.Policy{Name: "burst", Quota: 3, Window: time.Minute}), "", nil)
	e.metrics.ObserveStore(2*time.Millisecond, nil)
	e.metrics.ObserveStore(10*time.Millisecond, errors.New("i/o timeout"))
	e.metrics.StoreFailed("burst", true)
	e.metrics.StoreFailed("burst", true)
	e.metrics.StoreFailed("burst", false)
	// Two bans in the penalty box, one lifted: one in force, two made.
	for _, p := range []string{"203.0.113.0/24", "198.51.100.0/24"} {
		if code, _, body := e.call(t, "POST", "/api/v1/bans", strings.NewReader(`{"prefix":"`+p+`","duration":"1m","reason":"abuse"}`),
			"Content-Type", "application/json"); code != 201 {
			t.Fatalf("banning %s: %d %s", p, code, body)
		}
	}
	if code, _, body := e.call(t, "DELETE", "/api/v1/bans/198.51.100.0/24", nil); code != 204 {
		t.Fatalf("lifting 198.51.100.0/24: %d %s", code, body)
	}
	e.storeBreaker = func() bool { return true }
	got := e.scrape(t)
	for series, want := range map[string]float64{
		`h3edge_store_breaker_open`:                                               1,
		`h3edge_store_request_duration_seconds_count`:                             2,
		`h3edge_store_errors_total`:                                               1,
		`h3edge_ratelimit_decisions_total{policy="burst",result="failed_open"}`:   2,
		`h3edge_ratelimit_decisions_total{policy="burst",result="failed_closed"}`: 1,
		`h3edge_bans_active`:                                                      1,
		`h3edge_bans_total`:                                                       2,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	code, _, body := e.call(t, "GET", "/readyz", nil)
	var rd admin.Readiness
	json.Unmarshal(body, &rd)
	if code != 200 || rd != (admin.Readiness{Status: "degraded", Listeners: "up", Store: "breaker_open"}) {
		t.Errorf("/readyz with the breaker open: %d %s", code, body)
	}
}

// TestInstrumentCodes: the status requests_total counts is the final one the origin
// sent, through the chain of a real edge whose origin is an upstream on loopback.
func TestInstrumentCodes(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/nothing":
		case "/body":
			w.Write([]byte("x"))
		case "/404":
			w.WriteHeader(404)
		case "/hints-201":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(201)
		case "/flush-500":
			http.NewResponseController(w).Flush()
			w.WriteHeader(500) // too late: the 200 went out with the flush
		case "/999":
			w.WriteHeader(999)
		}
	}))
	up.Config.ErrorLog = log.New(io.Discard, "", 0) // the superfluous WriteHeader of /flush-500
	up.Start()
	t.Cleanup(up.Close)
	e := startOps(t, func(c *config.Config) { c.Upstream = up.URL }, "", nil)
	c := clientFor(t, "h2")
	for _, tc := range []struct {
		path string
		code int
	}{{"/nothing", 200}, {"/body", 200}, {"/404", 404}, {"/hints-201", 201}, {"/flush-500", 200}, {"/999", 999}} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			series := fmt.Sprintf(`h3edge_requests_total{code="%d",proto="h2"}`, tc.code)
			before := e.scrape(t)
			resp, err := c.Get(e.url + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if d := e.scrape(t)[series] - before[series]; d != 1 {
				t.Errorf("%s rose by %v, want 1 (the client saw %d)", series, d, resp.StatusCode)
			}
		})
	}
}

// TestChainAllocs: the chain of a real edge, instrumentation included, allocates
// nothing for a request no policy matches.
func TestChainAllocs(t *testing.T) {
	s, err := New(opsConfig(t, nil, ""), Options{Logger: slog.New(slog.DiscardHandler), CertCacheDir: certCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	var origin http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	s.origin.Store(&origin)
	r := httptest.NewRequestWithContext(identity.WithMemo(context.Background()), "GET", "https://127.0.0.1/", nil)
	r.RemoteAddr, r.ProtoMajor = "192.0.2.1:1234", 2
	w := &discardWriter{h: http.Header{}}
	if n := testing.AllocsPerRun(10_000, func() { clear(w.h); s.handler.ServeHTTP(w, r) }); n != 0 {
		t.Errorf("the chain allocates %v times per request", n)
	}
}
