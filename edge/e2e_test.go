package edge

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
)

// testEdge is an h3edge server running in the test process on a free loopback port.
type testEdge struct {
	*Server
	url  string // https://127.0.0.1:PORT
	port int
	done chan error
}

// startEdge starts an edge with the default configuration changed by mutate.
func startEdge(t testing.TB, mutate func(*config.Config)) *testEdge {
	t.Helper()
	return startEdgeWith(t, mutate, Options{})
}

// startEdgeWith is startEdge with options; the certificate cache is the test's, and
// the logger too unless opts has one.
func startEdgeWith(t testing.TB, mutate func(*config.Config), opts Options) *testEdge {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	// Tests send many requests from 127.0.0.1: the per-source budgets get out of the
	// way unless a test sets its own.
	cfg.IP = roomyIP
	cfg.Admin.Listen = "127.0.0.1:0" // many edges at once: no fixed admin port
	if mutate != nil {
		mutate(cfg)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	if opts.Logger == nil {
		opts.Logger = log
	}
	opts.CertCacheDir = certCache(t)
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	e := &testEdge{Server: s, port: s.Addr().Port, done: make(chan error, 1)}
	e.url = fmt.Sprintf("https://127.0.0.1:%d", e.port)
	go func() { e.done <- s.Serve() }()
	t.Cleanup(func() {
		s.Close()
		if err := <-e.done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

var roomyIP = config.IPConfig{
	Connections: config.Rate{Rate: 100000, Burst: 100000}, Streams: config.Rate{Rate: 100000, Burst: 100000},
	MaxConnections: 100000, MaxStreamsPerConnection: 100, RetryAbove: 1000000,
	MaxTracked: 100000, IPv4Prefix: 32, IPv6Prefix: 64,
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var (
	certCacheOnce sync.Once
	certCacheDir  string
)

// TestMain removes the certificate cache once every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if certCacheDir != "" {
		os.RemoveAll(certCacheDir)
	}
	os.Exit(code)
}

// certCache is one development-certificate cache for the whole test binary, so the
// certificate is generated once.
func certCache(t testing.TB) string {
	certCacheOnce.Do(func() {
		dir, err := makeTempDir()
		if err != nil {
			t.Fatal(err)
		}
		certCacheDir = dir
	})
	return certCacheDir
}

var insecureTLS = &tls.Config{InsecureSkipVerify: true}

// clientFor returns an HTTP client that speaks proto ("h3", "h2" or "h1") and nothing else.
func clientFor(t testing.TB, proto string) *http.Client {
	t.Helper()
	var rt http.RoundTripper
	switch proto {
	case "h3":
		tr := &http3.Transport{TLSClientConfig: insecureTLS.Clone()}
		t.Cleanup(func() { tr.Close() })
		rt = tr
	case "h2":
		tr := &http.Transport{TLSClientConfig: insecureTLS.Clone(), ForceAttemptHTTP2: true}
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		rt = tr
	case "h1":
		tr := &http.Transport{TLSClientConfig: insecureTLS.Clone(), MaxIdleConnsPerHost: 64}
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP1(true)
		t.Cleanup(tr.CloseIdleConnections)
		rt = tr
	default:
		t.Fatalf("unknown proto %q", proto)
	}
	return &http.Client{Transport: rt, Timeout: 10 * time.Second}
}

var protos = []struct{ name, want string }{
	{"h3", "HTTP/3.0"},
	{"h2", "HTTP/2.0"},
	{"h1", "HTTP/1.1"},
}

type demoReply struct {
	Proto      string      `json:"proto"`
	RemoteAddr string      `json:"remote_addr"`
	ClientAddr string      `json:"client_addr"`
	BodyBytes  int64       `json:"body_bytes"`
	Headers    http.Header `json:"headers"`
}

func getJSON(t testing.TB, c *http.Client, req *http.Request, v any) *http.Response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("decoding %q: %v", body, err)
		}
	}
	return resp
}

func TestDemoOriginEachProtocol(t *testing.T) {
	e := startEdge(t, nil)
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			var got demoReply
			req, _ := http.NewRequest("GET", e.url+"/", nil)
			resp := getJSON(t, clientFor(t, p.name), req, &got)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got.Proto != p.want || resp.Proto != p.want {
				t.Errorf("proto: origin saw %q, client got %q; want %q", got.Proto, resp.Proto, p.want)
			}
			if got.ClientAddr != "127.0.0.1" {
				t.Errorf("client_addr = %q, want 127.0.0.1", got.ClientAddr)
			}
			altSvc := resp.Header.Get("Alt-Svc")
			if p.name == "h3" {
				if altSvc != "" {
					t.Errorf("HTTP/3 response carries Alt-Svc %q", altSvc)
				}
			} else if want := fmt.Sprintf(`h3=":%d"`, e.port); !strings.HasPrefix(altSvc, want) {
				t.Errorf("Alt-Svc = %q, want prefix %q", altSvc, want)
			}
		})
	}
}

// upstreamRecorder is a real HTTP origin that answers with what it saw.
func upstreamRecorder(t testing.TB) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"xff":   r.Header.Get("X-Forwarded-For"),
			"proto": r.Header.Get("X-Forwarded-Proto"),
			"host":  r.Header.Get("X-Forwarded-Host"),
			"via":   r.Header.Get("Via"),
			"conn":  r.Header.Get("Connection") + r.Header.Get("Keep-Alive") + r.Header.Get("Te"),
		})
	}))
	t.Cleanup(up.Close)
	return up
}

func TestProxyEachProtocol(t *testing.T) {
	up := upstreamRecorder(t)
	e := startEdge(t, func(c *config.Config) { c.Upstream = up.URL })
	wantVia := map[string]string{"h3": "3 h3edge", "h2": "2 h3edge", "h1": "1.1 h3edge"}
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.url+"/anything", nil)
			// A client cannot choose its own address: the peer is not a trusted proxy.
			req.Header.Set("X-Forwarded-For", "203.0.113.7")
			req.Header.Set("Keep-Alive", "timeout=5")
			var got map[string]string
			resp := getJSON(t, clientFor(t, p.name), req, &got)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			want := map[string]string{
				"xff": "127.0.0.1", "proto": "https", "host": req.URL.Host,
				"via": wantVia[p.name], "conn": "",
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("upstream saw %s = %q, want %q", k, got[k], v)
				}
			}
			if p.name != "h3" && resp.Header.Get("Alt-Svc") == "" {
				t.Error("proxied response lacks Alt-Svc")
			}
		})
	}
}

func TestTrustedProxies(t *testing.T) {
	up := upstreamRecorder(t)
	tests := []struct {
		name    string
		trusted []string
		xff     []string
		client  string // what the demo origin reports
		sent    string // X-Forwarded-For the upstream sees
	}{
		{"untrusted peer", nil, []string{"203.0.113.7"}, "127.0.0.1", "127.0.0.1"},
		{"trusted peer", []string{"127.0.0.0/8"}, []string{"203.0.113.7"}, "203.0.113.7", "203.0.113.7, 127.0.0.1"},
		{"right-most untrusted", []string{"127.0.0.0/8", "10.0.0.0/8"},
			[]string{"198.51.100.1, 203.0.113.7", "10.1.2.3"}, "203.0.113.7", "198.51.100.1, 203.0.113.7, 10.1.2.3, 127.0.0.1"},
		{"garbage hop", []string{"127.0.0.0/8"}, []string{"203.0.113.7, nonsense"}, "127.0.0.1", "203.0.113.7, nonsense, 127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			demo := startEdge(t, func(c *config.Config) { c.TrustedProxies = tt.trusted })
			proxy := startEdge(t, func(c *config.Config) { c.TrustedProxies = tt.trusted; c.Upstream = up.URL })
			c := clientFor(t, "h2")
			req, _ := http.NewRequest("GET", demo.url+"/", nil)
			req.Header["X-Forwarded-For"] = tt.xff
			var d demoReply
			getJSON(t, c, req, &d)
			if d.ClientAddr != tt.client {
				t.Errorf("client_addr = %q, want %q", d.ClientAddr, tt.client)
			}
			req, _ = http.NewRequest("GET", proxy.url+"/", nil)
			req.Header["X-Forwarded-For"] = tt.xff
			var u map[string]string
			getJSON(t, c, req, &u)
			if u["xff"] != tt.sent {
				t.Errorf("upstream X-Forwarded-For = %q, want %q", u["xff"], tt.sent)
			}
		})
	}
}

func TestUpstreamUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	e := startEdge(t, func(c *config.Config) { c.Upstream = dead })
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			resp, err := clientFor(t, p.name).Get(e.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("status %d, want 502", resp.StatusCode)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			var doc struct{ Status int }
			if err := json.Unmarshal(body, &doc); err != nil || doc.Status != 502 {
				t.Errorf("problem document %q: %v", body, err)
			}
		})
	}
}

func TestUpstreamTimeout(t *testing.T) {
	up, _ := slowUpstream(t, 5*time.Second)
	e := startEdge(t, func(c *config.Config) { c.Upstream = up.URL; c.UpstreamTimeout = 200 * time.Millisecond })
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			start := time.Now()
			resp, body := do(t, clientFor(t, p.name), "GET", e.url+"/slow", nil, nil)
			if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), `"status":504`) {
				t.Errorf("status %d %s, want 504 problem", resp.StatusCode, body)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("504 after %v, want about the 200 ms budget", d)
			}
		})
	}
}

// TestServerSentEventsStream checks that events cross the proxy one by one: each arrives
// about 100 ms after the previous one, not all at once when the stream ends.
func TestServerSentEventsStream(t *testing.T) {
	origin := httptest.NewServer(demoOrigin(nil))
	t.Cleanup(origin.Close)
	e := startEdge(t, func(c *config.Config) { c.Upstream = origin.URL })
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			resp, err := clientFor(t, p.name).Get(e.url + "/stream?n=5")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("Content-Type %q", ct)
			}
			var arrivals []time.Time
			buf := make([]byte, 4096)
			var pending string
			for {
				n, err := resp.Body.Read(buf)
				pending += string(buf[:n])
				for {
					i := strings.Index(pending, "\n\n")
					if i < 0 {
						break
					}
					arrivals = append(arrivals, time.Now())
					pending = pending[i+2:]
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(arrivals) != 5 {
				t.Fatalf("got %d events, want 5", len(arrivals))
			}
			// Buffered delivery would bunch all five together; streamed ones are spread
			// over about 400 ms.
			if spread := arrivals[4].Sub(arrivals[0]); spread < 300*time.Millisecond {
				t.Errorf("events arrived within %v of each other: buffered, not streamed", spread)
			}
		})
	}
}

// TestLargeHeader431: a header section over 64 KiB, or with more than 500 fields, gets
// a 431 problem document, counted in requests_total, on HTTP/3 as on HTTP/2 and
// HTTP/1.1, and the edge serves on; 500 fields are served.
func TestLargeHeader431(t *testing.T) {
	e := startEdge(t, nil)
	fields := func(n int) http.Header { // n in all: the clients add none to these
		h := http.Header{"User-Agent": {"test"}, "Accept-Encoding": {"identity"}}
		for i := range n - 2 {
			h.Set(fmt.Sprintf("X-F%d", i), "v")
		}
		return h
	}
	for _, p := range protos {
		for _, c := range []struct {
			name   string
			header http.Header
			want   int
		}{
			{"100 KiB", http.Header{"X-Big": {strings.Repeat("a", 100<<10)}}, 431},
			{"501 fields", fields(501), 431},
			{"500 fields", fields(500), 200},
		} {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				series := []string{"proto", p.name, "code", "431"}
				before := counterValue(t, e.Server, "h3edge_requests_total", series...)
				req, err := http.NewRequest("GET", e.url+"/", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header = c.header
				resp, err := clientFor(t, p.name).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				grew := counterValue(t, e.Server, "h3edge_requests_total", series...) - before
				if c.want == 200 {
					if resp.StatusCode != 200 || grew != 0 {
						t.Errorf("%d (431s counted: %v), want 200", resp.StatusCode, grew)
					}
					return
				}
				var doc struct{ Status int }
				if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Content-Type") != "application/problem+json" ||
					json.Unmarshal(body, &doc) != nil || doc.Status != 431 {
					t.Errorf("%d %q %.200q, want a 431 problem document", resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
				if grew != 1 {
					t.Errorf("requests_total{proto=%q,code=\"431\"} grew by %v, want 1", p.name, grew)
				}
				// And the server still serves.
				resp, err = clientFor(t, p.name).Get(e.url + "/")
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("after 431: %v %v", resp, err)
				}
				resp.Body.Close()
			})
		}
	}
}

func TestMalformedHTTP1(t *testing.T) {
	e := startEdge(t, nil)
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n", // no Host
		"GARBAGE\r\n\r\n",
	} {
		conn, err := tls.Dial("tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, raw)
		line, _ := io.ReadAll(io.LimitReader(conn, 64))
		conn.Close()
		if !strings.HasPrefix(string(line), "HTTP/1.1 400 ") {
			t.Errorf("%q → %q, want HTTP/1.1 400", raw, line)
		}
	}
}

// TestZeroRTT sends requests in 0-RTT data and holds the client's handshake completion
// back, so the server must decide on them before the handshake completes — as it would
// for a replayed flight: GET is served, POST and DELETE get 425.
func TestZeroRTT(t *testing.T) {
	e := startEdge(t, nil)
	cache := tls.NewLRUClientSessionCache(4)
	tlsConf := &tls.Config{InsecureSkipVerify: true, ClientSessionCache: cache, NextProtos: []string{http3.NextProtoH3}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// First connection: a full handshake that leaves a session ticket behind.
	conn, err := quic.DialAddr(ctx, e.Addr().String(), tlsConf, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if status := rawH3Request(t, ctx, conn, "GET", "127.0.0.1", "/"); status != 200 {
		t.Fatalf("full handshake GET: %d", status)
	}
	conn.CloseWithError(0, "")

	for _, tt := range []struct {
		method string
		want   int
	}{{"GET", 200}, {"HEAD", 200}, {"POST", 425}, {"DELETE", 425}} {
		relay := newHandshakeHolder(t, e.Addr().String())
		relay.Gate() // the request must leave in 0-RTT: no server flight before it
		conn, err := quic.DialAddrEarly(ctx, relay.Addr(), tlsConf, &quic.Config{})
		if err != nil {
			t.Fatal(err)
		}
		before := relay.Sent()
		str := rawH3Send(t, ctx, conn, tt.method, "127.0.0.1", "/")
		relay.OpenAfter(before)
		status := rawH3Status(t, str)
		relay.Release()
		if !conn.ConnectionState().Used0RTT {
			t.Fatalf("%s: 0-RTT was not used", tt.method)
		}
		if status != tt.want {
			t.Errorf("%s in 0-RTT: status %d, want %d", tt.method, status, tt.want)
		}
		conn.CloseWithError(0, "")
	}
}

// TestGracefulShutdown: with requests in flight on HTTP/3 and HTTP/2, Shutdown lets every
// one of them finish with 200 and refuses new connections.
func TestGracefulShutdown(t *testing.T) {
	up, inflight := slowUpstream(t, 500*time.Millisecond)
	e := startEdge(t, func(c *config.Config) { c.Upstream = up.URL })
	const perProto = 25
	var wg sync.WaitGroup
	results := make(chan string, 2*perProto)
	started := make(chan struct{}, 2*perProto)
	for _, proto := range []string{"h3", "h2"} {
		c := clientFor(t, proto)
		// Open the connection first, so the requests below are in flight on it.
		if resp, err := c.Get(e.url + "/"); err != nil {
			t.Fatal(err)
		} else {
			resp.Body.Close()
		}
		for range perProto {
			wg.Go(func() {
				started <- struct{}{}
				resp, err := c.Get(e.url + "/slow?ms=500")
				if err != nil {
					results <- proto + ": " + err.Error()
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				results <- proto + ": " + strconv.Itoa(resp.StatusCode)
			})
		}
	}
	for range 2 * perProto {
		<-started
	}
	testkit.WaitFor(t, 5*time.Second, "every protocol's requests in flight", func() bool { return inflight.Load() >= 2*perProto })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- e.Shutdown(ctx) }()

	// New connections are refused while the old ones drain.
	testkit.WaitFor(t, 2*time.Second, "new connections refused", func() bool {
		d := net.Dialer{Timeout: 200 * time.Millisecond}
		c, err := d.Dial("tcp", e.Addr().String())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	fresh := clientFor(t, "h3")
	fresh.Timeout = time.Second
	if resp, err := fresh.Get(e.url + "/"); err == nil {
		resp.Body.Close()
		t.Error("a new HTTP/3 connection was served during shutdown")
	}

	wg.Wait()
	close(results)
	ok := 0
	for r := range results {
		if strings.HasSuffix(r, ": 200") {
			ok++
		} else {
			t.Errorf("in-flight request: %s", r)
		}
	}
	if ok != 2*perProto {
		t.Errorf("%d of %d in-flight requests finished with 200", ok, 2*perProto)
	}
	if err := <-shutdownDone; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// slowUpstream is an origin that answers after d and counts the requests it holds.
func slowUpstream(t testing.TB, d time.Duration) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			n.Add(1)
			defer n.Add(-1)
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	return up, &n
}
