package bench

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// runT runs c against the test servers with a hard bound, failing the test on error.
func runT(t *testing.T, c Config) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if c.Pins == nil && !c.Insecure && c.RootCAs == nil {
		c.Pins = []string{testPin(t)}
	}
	res, err := Run(ctx, c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func TestClosedLoop(t *testing.T) {
	for _, tc := range []struct {
		proto     Proto
		wantProto string
	}{
		{H3, "HTTP/3.0"},
		{H2, "HTTP/2.0"},
		{H1, "HTTP/1.1"},
	} {
		t.Run(string(tc.proto), func(t *testing.T) {
			rec := newRecorder()
			url := start(t, tc.proto, rec)
			var hooked, measured, measuredOK atomic.Int64
			res := runT(t, Config{
				URL: url, Proto: tc.proto, Connections: 2, Streams: 4, Requests: 200,
				Timeout: 2 * time.Second,
				OnResponse: func(resp *http.Response) time.Duration {
					hooked.Add(1)
					return 0
				},
				OnMeasured: func(at time.Time, latency time.Duration, status int) {
					measured.Add(1)
					if status == http.StatusOK && latency > 0 && !at.IsZero() {
						measuredOK.Add(1)
					}
				},
			})
			if res.Requests != 200 || res.Responses != 200 || res.Status[200] != 200 {
				t.Fatalf("requests %d, responses %d, status %v, errors %v; want 200 × 200 OK",
					res.Requests, res.Responses, res.Status, res.Errors)
			}
			for k, n := range res.Errors {
				if n != 0 {
					t.Errorf("errors[%s] = %d", k, n)
				}
			}
			l := res.Latency
			if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max && l.Max < 2*time.Second) {
				t.Errorf("latency not sane: %+v", l)
			}
			if res.Histogram.TotalCount() != 200 {
				t.Errorf("histogram holds %d values, want 200", res.Histogram.TotalCount())
			}
			if res.Bytes != 200*int64(len("ok")) {
				t.Errorf("bytes = %d, want 400", res.Bytes)
			}
			if res.Duration <= 0 || res.RequestsPerSecond <= 0 {
				t.Errorf("duration %v, rate %v", res.Duration, res.RequestsPerSecond)
			}
			if hooked.Load() != 200 {
				t.Errorf("hook saw %d responses, want 200", hooked.Load())
			}
			if measured.Load() != 200 || measuredOK.Load() != 200 {
				t.Errorf("OnMeasured saw %d requests, %d of them 200 with a latency, want 200", measured.Load(), measuredOK.Load())
			}
			got := rec.snapshot()
			if got.count != 200 || got.protos[tc.wantProto] != 200 {
				t.Errorf("server saw %d requests, protocols %v; want 200 × %s", got.count, got.protos, tc.wantProto)
			}
		})
	}
}

func TestConnectionsAreDistinct(t *testing.T) {
	for _, tc := range []struct {
		proto     Proto
		c, m      int
		wantConns int
	}{
		{H3, 4, 4, 4},
		{H2, 4, 4, 4},
		{H1, 2, 2, 4}, // h1: -m 2 makes two connections per -c
	} {
		t.Run(string(tc.proto), func(t *testing.T) {
			rec := newRecorder()
			rec.delay = 2 * time.Millisecond // keep every worker busy at once
			url := start(t, tc.proto, rec)
			res := runT(t, Config{URL: url, Proto: tc.proto, Connections: tc.c, Streams: tc.m, Requests: 200, Timeout: 2 * time.Second})
			if res.Status[200] != 200 {
				t.Fatalf("status %v, errors %v", res.Status, res.Errors)
			}
			got := rec.snapshot()
			if got.conns != tc.wantConns || len(got.remotes) != tc.wantConns {
				t.Errorf("server saw %d connections from %d remote addresses %v; want %d",
					got.conns, len(got.remotes), got.remotes, tc.wantConns)
			}
			if res.Connections != tc.wantConns {
				t.Errorf("Result.Connections = %d, want %d", res.Connections, tc.wantConns)
			}
		})
	}
}

func TestSources(t *testing.T) {
	srcs, err := ParseSources("127.0.0.2-127.0.0.5")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Proto{H3, H2} {
		t.Run(string(p), func(t *testing.T) {
			rec := newRecorder()
			url := start(t, p, rec)
			res := runT(t, Config{URL: url, Proto: p, Connections: 8, Streams: 2, Requests: 200, Sources: srcs, Timeout: 2 * time.Second})
			if res.Status[200] != 200 {
				t.Fatalf("status %v, errors %v", res.Status, res.Errors)
			}
			got := rec.snapshot()
			var ips []string
			for ip := range got.ips {
				ips = append(ips, ip)
			}
			sort.Strings(ips)
			if want := "127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5"; strings.Join(ips, " ") != want {
				t.Errorf("server saw sources %v, want %s", ips, want)
			}
			if got.conns != 8 {
				t.Errorf("server saw %d connections, want 8", got.conns)
			}
		})
	}
}

// perfBounds reports whether the tests assert their tight timing bounds: only with
// H3EDGE_PERF=1, on a machine the test has to itself. Otherwise the bounds are 20×
// looser, which a loaded 2-core CI machine meets and a broken pacer does not.
func perfBounds() bool { return os.Getenv("H3EDGE_PERF") == "1" }

// TestOpenLoopPacing: an open loop at -rate 500 for 1 s sends 500 requests, evenly.
// A loaded machine can only make the client fall behind its schedule, never ahead: the
// upper bound on the count holds in every run; the lower bound and the evenness are
// the tight ones (± 2 %, a median lag of 3 ms) with H3EDGE_PERF=1 and 20× looser
// without.
func TestOpenLoopPacing(t *testing.T) {
	rec := newRecorder()
	url := startH3(t, rec, false)
	res := runT(t, Config{URL: url, Connections: 4, Streams: 8, Rate: 500, Duration: time.Second, Timeout: 2 * time.Second})
	got := rec.snapshot()
	loose := 20
	if perfBounds() {
		loose = 1
	}
	if lo := 500 - 10*loose; got.count < lo || got.count > 510 {
		t.Fatalf("server got %d requests at -rate 500 for 1s, want %d to 510 (H3EDGE_PERF=%v)", got.count, lo, perfBounds())
	}
	if res.Requests != int64(got.count) || res.Status[200] != res.Requests {
		t.Errorf("result: %d requests, status %v; server %d", res.Requests, res.Status, got.count)
	}
	// Evenness at the server: arrival k should come about k × 2 ms after the start.
	// Compare each arrival with its slot (origin: the median offset, robust to a late
	// first handshake) and allow for the shared machine: a stall delays some arrivals,
	// then the schedule catches up with a burst, as an open loop must. The pure
	// schedule is checked exactly in TestPacer.
	sort.Slice(got.times, func(i, j int) bool { return got.times[i].Before(got.times[j]) })
	offsets := make([]time.Duration, len(got.times))
	for k, at := range got.times {
		offsets[k] = at.Sub(got.times[0]) - time.Duration(k)*2*time.Millisecond
	}
	sorted := append([]time.Duration(nil), offsets...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	origin := sorted[len(sorted)/2]
	lags := make([]time.Duration, len(offsets))
	for k, o := range offsets {
		lags[k] = (o - origin).Abs()
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	// A pacer that sent in bursts (or all at once) lags by hundreds of milliseconds at
	// the median, far beyond even the loose bounds (60 ms, 400 ms).
	maxMed, maxP80 := time.Duration(loose)*3*time.Millisecond, time.Duration(loose)*20*time.Millisecond
	if med, p80 := lags[len(lags)/2], lags[len(lags)*8/10]; med > maxMed || p80 > maxP80 {
		t.Errorf("arrivals off the 2 ms grid: median lag %v, 80th percentile %v (want at most %v, %v)", med, p80, maxMed, maxP80)
	}
}

func TestOpenLoopMeasuresFromIntendedTime(t *testing.T) {
	// One worker, each response takes 50 ms, schedule every 10 ms: the worker falls
	// behind at once, sends immediately, and latency keeps growing from the intended
	// times (coordinated omission would report ~50 ms throughout).
	rec := newRecorder()
	rec.delay = 50 * time.Millisecond
	url := startH3(t, rec, false)
	res := runT(t, Config{URL: url, Rate: 100, Requests: 10, Timeout: 2 * time.Second})
	if res.Responses != 10 {
		t.Fatalf("responses %d, errors %v", res.Responses, res.Errors)
	}
	// Request 9 is intended at 90 ms and answered at about 10 × 50 = 500 ms.
	if res.Latency.Max < 300*time.Millisecond {
		t.Errorf("max latency %v: not measured from the intended send time", res.Latency.Max)
	}
	if res.Latency.P50 < 100*time.Millisecond {
		t.Errorf("p50 %v: not measured from the intended send time", res.Latency.P50)
	}
}

func TestWarmupExcluded(t *testing.T) {
	rec := newRecorder()
	url := startTLS(t, rec)
	res := runT(t, Config{URL: url, Proto: H2, Requests: 50, Warmup: 200 * time.Millisecond, Timeout: 2 * time.Second})
	got := rec.snapshot()
	if res.Requests != 50 || got.count <= 50 {
		t.Errorf("measured %d of %d sent; want 50 measured and warm-up requests on top", res.Requests, got.count)
	}
}

func TestKeys(t *testing.T) {
	rec := newRecorder()
	url := startTLS(t, rec)
	runT(t, Config{URL: url, Proto: H2, Streams: 4, Requests: 400, Keys: 5, Zipf: 2, Timeout: 2 * time.Second})
	got := rec.snapshot()
	if len(got.keys) == 0 || len(got.keys) > 5 {
		t.Fatalf("keys seen: %v", got.keys)
	}
	for k, n := range got.keys {
		if k < "k-000000" || k > "k-000004" || len(k) != len("k-000000") {
			t.Errorf("unexpected key %q", k)
		}
		if k != "k-000000" && n >= got.keys["k-000000"] {
			t.Errorf("zipf: %s seen %d times, not fewer than k-000000 (%d)", k, n, got.keys["k-000000"])
		}
	}
}

func TestPins(t *testing.T) {
	_, leaf := selfSigned(t)
	for _, p := range []Proto{H3, H2} {
		t.Run(string(p), func(t *testing.T) {
			url := start(t, p, newRecorder())
			ok := runT(t, Config{URL: url, Proto: p, Requests: 3, Pins: []string{SPKIPin(leaf)}, Timeout: 2 * time.Second})
			if ok.Status[200] != 3 {
				t.Errorf("right pin: status %v, errors %v", ok.Status, ok.Errors)
			}
			wrong := runT(t, Config{URL: url, Proto: p, Requests: 3, Pins: []string{"sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, Timeout: 2 * time.Second})
			if wrong.Responses != 0 || wrong.Errors[ErrTLS] != 3 {
				t.Errorf("wrong pin: status %v, errors %v; want 3 tls errors", wrong.Status, wrong.Errors)
			}
			unknown := runT(t, Config{URL: url, Proto: p, Requests: 2, Pins: []string{}, RootCAs: x509Pool(), Timeout: 2 * time.Second})
			if unknown.Errors[ErrTLS] != 2 {
				t.Errorf("unknown CA: errors %v, want 2 tls", unknown.Errors)
			}
			pool := x509Pool()
			pool.AddCert(leaf)
			roots := runT(t, Config{URL: url, Proto: p, Requests: 2, RootCAs: pool, Timeout: 2 * time.Second})
			if roots.Status[200] != 2 {
				t.Errorf("RootCAs with the cert: status %v, errors %v", roots.Status, roots.Errors)
			}
		})
	}
}

func TestErrorKinds(t *testing.T) {
	t.Run("h3 refused", func(t *testing.T) {
		url := startH3(t, newRecorder(), true)
		res := runT(t, Config{URL: url, Requests: 4, Timeout: 2 * time.Second})
		if res.Errors[ErrRefused] != 4 {
			t.Errorf("errors %v, want 4 refused", res.Errors)
		}
	})
	t.Run("tcp refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		for _, p := range []Proto{H2, H1} {
			res := runT(t, Config{URL: "https://" + addr + "/", Proto: p, Requests: 4, Timeout: 2 * time.Second})
			if res.Errors[ErrRefused] != 4 {
				t.Errorf("%s: errors %v, want 4 refused", p, res.Errors)
			}
		}
	})
	for _, p := range []Proto{H3, H2, H1} {
		t.Run(string(p)+" timeout", func(t *testing.T) {
			rec := newRecorder()
			rec.delay = time.Second
			url := start(t, p, rec)
			res := runT(t, Config{URL: url, Proto: p, Streams: 2, Requests: 4, Timeout: 150 * time.Millisecond})
			if res.Errors[ErrTimeout] != 4 || res.Responses != 0 {
				t.Errorf("errors %v, status %v; want 4 timeouts", res.Errors, res.Status)
			}
		})
	}
}

func TestRunInterrupted(t *testing.T) {
	url := startH3(t, newRecorder(), false)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, Config{URL: url, Duration: time.Minute, Pins: []string{testPin(t)}})
	if err == nil || res == nil || res.Responses == 0 {
		t.Fatalf("interrupted run: result %v, err %v; want partial results and ctx's error", res, err)
	}
	for k, n := range res.Errors {
		if n != 0 {
			t.Errorf("interruption counted as %d %s errors", n, k)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"minimal", Config{URL: "https://127.0.0.1:8443/"}, true},
		{"no url", Config{}, false},
		{"h3 over http", Config{URL: "http://127.0.0.1/"}, false},
		{"h1 over http", Config{URL: "http://127.0.0.1/", Proto: H1}, true},
		{"bad proto", Config{URL: "https://x/", Proto: "h4"}, false},
		{"negative conns", Config{URL: "https://x/", Connections: -1}, false},
		{"zipf below 1", Config{URL: "https://x/", Zipf: 0.5}, false},
		{"zipf", Config{URL: "https://x/", Zipf: 1.1, Keys: 10}, true},
		{"bad method", Config{URL: "https://x/", Method: "GE T"}, false},
		{"bad pin", Config{URL: "https://x/", Pins: []string{"nope"}}, false},
		{"mixed sources", Config{URL: "https://x/", Sources: []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::1")}}, false},
		{"negative rate", Config{URL: "https://x/", Rate: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestParseHeader(t *testing.T) {
	for _, tc := range []struct{ in, name, value string }{
		{"X-Test: a b", "X-Test", "a b"},
		{"x-api-key:k1", "X-Api-Key", "k1"},
		{"Host: example.com", "Host", "example.com"},
		{"bad header", "", ""},
		{": v", "", ""},
	} {
		name, value, err := ParseHeader(tc.in)
		if name != tc.name || value != tc.value || (err == nil) != (tc.name != "") {
			t.Errorf("ParseHeader(%q) = %q, %q, %v", tc.in, name, value, err)
		}
	}
}

func TestHostHeader(t *testing.T) {
	rec := newRecorder()
	url := startTLS(t, rec)
	runT(t, Config{URL: url, Proto: H1, Requests: 1, Header: http.Header{"Host": {"example.test"}}, Timeout: 2 * time.Second})
	if got := rec.snapshot(); got.hosts["example.test"] != 1 {
		t.Errorf("server saw hosts %v, want example.test", got.hosts)
	}
}

func x509Pool() *x509.CertPool { return x509.NewCertPool() }

func TestH3RedialsAfterConnectionLoss(t *testing.T) {
	rec := newRecorder()
	rec.after = func(n int) {
		if n == 100 {
			rec.mu.Lock()
			conns := append([]*quic.Conn(nil), rec.qconns...)
			rec.mu.Unlock()
			for _, c := range conns {
				c.CloseWithError(0x100, "test closes the connection")
			}
		}
	}
	url := startH3(t, rec, false)
	res := runT(t, Config{URL: url, Streams: 4, Requests: 300, Timeout: 2 * time.Second})
	got := rec.snapshot()
	t.Logf("connections %d, status %v, errors %v", got.conns, res.Status, res.Errors)
	if got.conns < 2 {
		t.Errorf("server saw %d connections, want a redial after the close", got.conns)
	}
	if res.Requests != 300 || res.Status[200] < 290 {
		t.Errorf("requests %d, status %v, errors %v; want nearly all 300 answered", res.Requests, res.Status, res.Errors)
	}
	if res.Errors[ErrOther] != 0 {
		t.Errorf("connection loss classified as other: %v", res.Errors)
	}
}

func TestProgress(t *testing.T) {
	url := startH3(t, newRecorder(), false)
	var out strings.Builder
	runT(t, Config{URL: url, Rate: 50, Duration: 1200 * time.Millisecond, Progress: &out})
	if !strings.Contains(out.String(), "requests") || !strings.HasPrefix(out.String(), "\r") || !strings.HasSuffix(out.String(), "\n") {
		t.Errorf("progress output %q", out.String())
	}
}
