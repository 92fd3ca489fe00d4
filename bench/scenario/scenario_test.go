package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/testkit"
)

// The scenario tests run each implemented scenario in short mode against real
// processes: h3edge built from this module (or $H3EDGE) and the bare server, which is
// this test binary run again with -h3bench.serve-bare.

var serveBareFlag = flag.String("h3bench.serve-bare", "", "run the bare server on this address instead of the tests (used by the scenario tests)")

var serveOriginFlag = flag.String("h3bench.serve-origin", "", "run the proxy scenario's origin on this address instead of the tests")

func TestMain(m *testing.M) {
	flag.Parse()
	if *serveOriginFlag != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := ServeOrigin(ctx, *serveOriginFlag, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if *serveBareFlag != "" {
		UseEdgeGC()
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := ServeBare(ctx, *serveBareFlag, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	builtDir  string
	builtBin  string
	buildErr  error
)

// h3edgeForTests returns $H3EDGE or an h3edge built once for the test binary.
func h3edgeForTests(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("H3EDGE"); p != "" {
		return p
	}
	_, err := exec.LookPath("go")
	testkit.Require(t, "the go command (to build h3edge; or set $H3EDGE)", err == nil)
	buildOnce.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "h3bench-test-")
		if buildErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			builtBin, buildErr = buildH3edge(ctx, builtDir)
		}
	})
	if buildErr != nil {
		t.Fatalf("building h3edge: %v", buildErr)
	}
	return builtBin
}

// scenarioOptions are the short-mode options the tests run scenarios with.
func scenarioOptions(t *testing.T) Options {
	testkit.Require(t, "Linux (/proc)", runtime.GOOS == "linux")
	testkit.Require(t, "taskset and two CPUs", pinning())
	return Options{
		Short:  true,
		H3edge: h3edgeForTests(t),
		BareCommand: func(listen string) []string {
			return []string{os.Args[0], "-h3bench.serve-bare=" + listen}
		},
		OriginCommand: func(listen string) []string {
			return []string{os.Args[0], "-h3bench.serve-origin=" + listen}
		},
		Dir: t.TempDir(),
		Log: tlog{t},
	}
}

// tlog writes progress lines to the test log.
type tlog struct{ t *testing.T }

func (l tlog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// perfClaims reports whether the tests assert the scenarios' timing claims — a
// throughput floor, a p99 bound, a CPU-cost ratio, the short mode's time budget —
// which hold only on a machine the tests have to themselves: with H3EDGE_PERF=1.
// Without it those verdicts are logged, and the tests assert what a loaded 2-core
// machine always meets: what was decided, counted and answered.
func perfClaims() bool { return os.Getenv("H3EDGE_PERF") == "1" }

// timedClaims are the scenarios whose claim is a timing claim: their verdict is
// asserted only with H3EDGE_PERF=1, their functional part by their tests in every run.
var timedClaims = map[string]bool{"baseline": true, "noisy-neighbour": true, "outage": true, "drop-cost": true, "proxy": true}

func TestScenarios(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(*testing.T, *Report)
	}{
		{"baseline", checkBaseline},
		{"boundary", nil},
		{"fields", nil},
		{"noisy-neighbour", checkNoisy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := shortScenario(t, tc.name)
			if !rep.Pinned {
				t.Error("servers not pinned although taskset is available")
			}
			if tc.check != nil {
				tc.check(t, rep)
			}
		})
	}
}

// checkBaseline checks what the baseline measured, whatever the ratios: every
// protocol in order, each pair measured both servers, and every run was answered
// without an error.
func checkBaseline(t *testing.T, rep *Report) {
	fig, ok := rep.Figures.(*baselineFigures)
	if !ok {
		t.Fatalf("figures %T", rep.Figures)
	}
	if len(fig.Protocols) != len(baselineLoads) {
		t.Fatalf("%d protocols, want %d", len(fig.Protocols), len(baselineLoads))
	}
	for i, bp := range fig.Protocols {
		if bp.Proto != baselineLoads[i].proto {
			t.Errorf("protocol %d is %s, want %s", i, bp.Proto, baselineLoads[i].proto)
		}
		if len(bp.Ratios) == 0 || !(bp.Median > 0) || !(bp.EdgeRPS > 0) || !(bp.BareRPS > 0) || !(bp.EdgeCPUus > 0) || !(bp.BareCPUus > 0) {
			t.Errorf("%s: ratios %v, req/s %.0f and %.0f, CPU/request %.1f and %.1f µs", bp.Proto, bp.Ratios, bp.EdgeRPS, bp.BareRPS, bp.EdgeCPUus, bp.BareCPUus)
		}
		if bp.Holds != (bp.Median >= bp.Floor) {
			t.Errorf("%s: holds %v with median %.2f against floor %.1f", bp.Proto, bp.Holds, bp.Median, bp.Floor)
		}
	}
	servers := make(map[string]int)
	for _, r := range fig.Runs {
		servers[r.Server]++
		if r.Requests == 0 || r.Errors > 0 {
			t.Errorf("%s %s pair %d: %d requests, %d errors", r.Server, r.Proto, r.Pair, r.Requests, r.Errors)
		}
	}
	if servers["h3edge"] == 0 || servers["h3edge"] != servers["bare"] {
		t.Errorf("runs per server %v, want pairs of h3edge and bare", servers)
	}
}

// checkNoisy checks what the noisy-neighbour run did, whatever the latencies: the
// legitimate clients were served (at 80 %: twenty times the failures the claim
// allows), the bare server refused nothing, and h3edge admitted no more of the
// attacker than its per-ip policy allows.
func checkNoisy(t *testing.T, rep *Report) {
	fig, ok := rep.Figures.(*noisyFigures)
	if !ok {
		t.Fatalf("figures %T", rep.Figures)
	}
	sched, err := newNoisySchedule(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(fig.Phases) != len(sched.steps) {
		t.Fatalf("%d phases, want %d", len(fig.Phases), len(sched.steps))
	}
	for i, p := range fig.Phases {
		st := sched.steps[i]
		if p.Phase != st.phase || p.Attack != st.attack {
			t.Errorf("phase %d: %q (attack %v), want %q (attack %v)", i, p.Phase, p.Attack, st.phase, st.attack)
		}
		if p.LegitSent == 0 || p.Server == "h3edge" && p.LegitSuccess < 0.8 {
			t.Errorf("%s: legitimate %d sent, %.2f%% ok", p.Phase, p.LegitSent, 100*p.LegitSuccess)
		}
		if !p.Attack {
			if p.AttackSent != 0 {
				t.Errorf("%s: the attacker sent %d in a quiet phase", p.Phase, p.AttackSent)
			}
			continue
		}
		switch p.Server {
		case "bare":
			if p.Attack429 != 0 || p.AttackOK == 0 {
				t.Errorf("%s: the attacker got %d 200s and %d 429s from a server without limits", p.Phase, p.AttackOK, p.Attack429)
			}
		case "h3edge":
			// The token bucket admits at most its quota at the start and its rate
			// after, over warm-up and measurement. What it did not admit was refused
			// (429, reset) or, once the source was banned, dropped: left unanswered
			// or never sent.
			most := int64(noisyPolicyQuota * (1 + (sched.warm + sched.dur).Seconds()))
			if offered := p.AttackSent + p.AttackUnsent; p.AttackOK > most || p.AttackOK >= offered {
				t.Errorf("%s: the attacker got %d 200s of %d offered (policy allows at most %d)", p.Phase, p.AttackOK, offered, most)
			}
		}
	}
}

// shortScenario runs scenario name in short mode and checks what every scenario owes:
// it finishes, its JSON reports its verdict and its SVG is well formed, and its claim
// holds — for a timing claim (timedClaims) only with H3EDGE_PERF=1, which also
// asserts the short mode's time budget.
func shortScenario(t *testing.T, name string) *Report {
	t.Helper()
	opt := scenarioOptions(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, name, opt)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	switch {
	case rep.Holds:
	case timedClaims[name] && !perfClaims():
		t.Logf("timing claim does not hold on this machine (asserted with H3EDGE_PERF=1): %s", rep.Verdict)
	default:
		t.Errorf("claim does not hold: %s", rep.Verdict)
	}
	limit := 12 * time.Second
	if rep.Remeasured {
		limit = 18 * time.Second // the h3edge pair again: two more short phases
	}
	if d := time.Since(start); d > limit && perfClaims() {
		t.Errorf("short mode took %v, want at most %v (plus the build)", d, limit-2*time.Second)
	}
	b, err := json.Marshal(rep)
	if err != nil || !json.Valid(b) || !bytes.Contains(b, fmt.Appendf(nil, `"holds":%v`, rep.Holds)) {
		t.Errorf("JSON: %v %s", err, b)
	}
	if rep.Chart == nil {
		t.Fatal("no chart")
	}
	var svg bytes.Buffer
	if err := rep.Chart.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	testkit.CheckSVG(t, svg.Bytes())
	return rep
}

// TestDropCost runs drop-cost in short mode and asserts that the measurement works:
// every layer refused units and counted them, the flooders saw what h3edge counted,
// nothing answered the banned source, no layer leaked into another, and a banned
// source's datagram is the cheapest unit. With H3EDGE_PERF=1 it asserts the claim
// too (a banned datagram at least 20× cheaper than a full 429 in short mode) and the
// short mode's time budget.
func TestDropCost(t *testing.T) {
	opt := scenarioOptions(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, "drop-cost", opt)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	if d := time.Since(start); d > 12*time.Second && perfClaims() {
		t.Errorf("short mode took %v, want at most 10 s (plus the build)", d)
	}
	if !rep.Pinned {
		t.Error("servers not pinned although taskset is available")
	}
	fig, ok := rep.Figures.(*dropCostFigures)
	if !ok {
		t.Fatalf("figures %T", rep.Figures)
	}
	layers := make(map[string]*dropResult)
	for _, l := range fig.Layers {
		layers[l.Key] = l
		if !(l.PerUnitUs > 0) || math.IsInf(l.PerUnitUs, 0) {
			t.Errorf("%s: %v µs per unit", l.Key, l.PerUnitUs)
		}
		if len(l.Stray) > 0 {
			t.Errorf("%s: other refusal counters moved: %v", l.Key, l.Stray)
		}
		var units float64
		saw := make(map[string]int64)
		for _, r := range l.Rounds {
			units += r.Units
			for k, v := range r.Client.Outcomes {
				saw[k] += v
			}
		}
		// What the flooder saw refused, h3edge counted (QUIC handshakes may count a
		// retransmitted Initial twice; replayed datagrams are partly dropped unread).
		var client int64
		switch l.Key {
		case "datagram":
			client = saw["sent"]
			if saw["answered"] != 0 {
				t.Errorf("datagram: h3edge answered the banned source %d times", saw["answered"])
			}
		case "quic":
			client = saw["refused"]
		case "tcp":
			client = saw["held"] + saw["reset"] // the tarpit holds; evicted, it resets
		case "stream":
			client = saw["reset"]
		case "prebuilt", "full-h3", "full-h2":
			client = saw["429"]
		}
		if l.Key != "quic-replay" {
			over := 1.15
			if l.Key == "quic" {
				// Every CONNECTION_REFUSED that quic-go's queue of 4 drops on a busy
				// machine brings the Initial back, counted again (CI saw 1.16×).
				over = 1.3
			}
			if lo, hi := 0.97*float64(client), over*float64(client); units < lo || units > hi {
				t.Errorf("%s: h3edge counted %.0f units, the flooder saw %d (%v)", l.Key, units, client, saw)
			}
		}
	}
	dg := layers["datagram"]
	for _, k := range []string{"quic", "tcp", "stream", "prebuilt", "full-h3", "full-h2"} {
		if dg.PerUnitUs >= layers[k].PerUnitUs {
			t.Errorf("a banned datagram (%.2f µs) costs no less than a %s (%.2f µs)", dg.PerUnitUs, layers[k].Name, layers[k].PerUnitUs)
		}
	}
	if !rep.Holds && perfClaims() {
		t.Errorf("claim fails: %s", rep.Verdict)
	} else if !rep.Holds {
		t.Logf("timing claim does not hold on this machine (asserted with H3EDGE_PERF=1): %s", rep.Verdict)
	}
	b, err := json.Marshal(rep)
	if err != nil || !json.Valid(b) {
		t.Errorf("JSON: %v %s", err, b)
	}
	var svg bytes.Buffer
	if err := rep.Chart.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	testkit.CheckSVG(t, svg.Bytes())
}

func TestParseExposition(t *testing.T) {
	in := `# HELP h3edge_bans_total Bans.
# TYPE h3edge_bans_total counter
h3edge_bans_total 3
h3edge_requests_total{code="429",proto="h3"} 1.5e+06
h3edge_x{label="with space } inside"} 7 1700000000000
go_info{version="go1.26.8"} 1
`
	got, err := parseExposition(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"h3edge_bans_total":                            3,
		`h3edge_requests_total{code="429",proto="h3"}`: 1.5e6,
		`h3edge_x{label="with space } inside"}`:        7,
		`go_info{version="go1.26.8"}`:                  1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := parseExposition(strings.NewReader("h3edge_bad{} x\n")); err == nil {
		t.Error("a bad value parsed")
	}
}

// TestParseExpositionAsPrinted: every series client_golang writes is a key, spelled as the
// line prints it, whatever the metric's type.
func TestParseExpositionAsPrinted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "h3edge_requests_total", Help: "Requests."}, []string{"proto", "code"})
	c.WithLabelValues("h3", "429").Add(1.5e6)
	c.WithLabelValues(`a "q" \ b`+"\n}", "200").Inc()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "h3edge_open_connections", Help: "Open."})
	g.Set(-2.25)
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h3edge_store_duration_seconds", Help: "Store.", Buckets: []float64{0.0005, 1, 2.5}}, []string{"store"})
	h.WithLabelValues("redis").Observe(0.7)
	sm := prometheus.NewSummary(prometheus.SummaryOpts{Name: "h3edge_x_seconds", Help: "X.", Objectives: map[float64]float64{0.5: 0.05, 0.99: 0.001}})
	sm.Observe(3)
	reg.MustRegister(c, g, h, sm)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{}
	for line := range strings.Lines(text.String()) {
		if line = strings.TrimSuffix(line, "\n"); line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		want[line[:i]] = v
	}
	got, err := parseExposition(&text)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 13 || !maps.Equal(got, want) {
		t.Errorf("got %v,\nwant %v", got, want)
	}
}

func TestScenarioClaimsAndUnknown(t *testing.T) {
	for _, name := range Names() {
		if claim, err := Claim(name); err != nil || claim == "" {
			t.Errorf("%s: claim %q, err %v", name, claim, err)
		}
	}
	if _, err := Run(t.Context(), "nope", Options{}); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown scenario: err = %v", err)
	}
	if got := Names(); len(got) != 8 {
		t.Errorf("Names() = %v, want the 7 of DESIGN §3 and proxy (issues 12 and 16)", got)
	}
}

func TestServeBare(t *testing.T) {
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- ServeBare(ctx, addr, pw) }()
	line, err := readLine(pr)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	m := pinRe.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("ready line %q has no pin", line)
	}
	for _, p := range []bench.Proto{bench.H3, bench.H2, bench.H1} {
		var got struct {
			Proto      string              `json:"proto"`
			ClientAddr string              `json:"client_addr"`
			Path       string              `json:"path"`
			Headers    map[string][]string `json:"headers"`
		}
		res := runT(t, bench.Config{URL: "https://" + addr + "/echo", Proto: p, Requests: 10, Pins: []string{m[1]}})
		if res.Status[200] != 10 {
			t.Fatalf("%s: status %v, errors %v", p, res.Status, res.Errors)
		}
		body := fetchBody(t, p, "https://"+addr+"/echo", m[1])
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %v: %s", p, err, body)
		}
		want := map[bench.Proto]string{bench.H3: "HTTP/3.0", bench.H2: "HTTP/2.0", bench.H1: "HTTP/1.1"}[p]
		if got.Proto != want || got.ClientAddr != "127.0.0.1" || got.Path != "/echo" || got.Headers["X-Test"][0] != "1" {
			t.Errorf("%s: echo %+v", p, got)
		}
		body = fetchBody(t, p, "https://"+addr+"/bytes?n=70000", m[1])
		if len(body) != 70000 {
			t.Errorf("%s: /bytes?n=70000 gave %d bytes", p, len(body))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// runT runs c with a hard bound, failing the test on error.
func runT(t *testing.T, c bench.Config) *bench.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := bench.Run(ctx, c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// fetchBody GETs url once over p, with the header X-Test: 1, and returns the body
// (bench.Run discards bodies, so this uses one of its connections directly).
func fetchBody(t *testing.T, p bench.Proto, url, pin string) []byte {
	t.Helper()
	conns, err := bench.Dial(t.Context(), bench.Config{URL: url, Proto: p, Pins: []string{pin}})
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test", "1")
	resp, err := conns.RoundTrip(0, req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readLine(r io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := r.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
}

func TestRedisHelper(t *testing.T) {
	_, err := exec.LookPath("redis-server")
	testkit.Require(t, "redis-server", err == nil)
	e := &env{opt: Options{NoPin: true}, log: tlog{t}, dir: t.TempDir()}
	defer e.close()
	p, addr, err := e.startRedis(t.Context(), "redis")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := readLine(c)
	if err != nil || reply != "+PONG\r" {
		t.Fatalf("PING: %q, %v", reply, err)
	}
	if cpu, err := p.cpu(); err != nil || cpu < 0 {
		t.Errorf("redis CPU %v, %v", cpu, err)
	}
}
