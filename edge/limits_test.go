package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/identity"
)

// limitsOrigin is the upstream of the limits tests: /…/big streams 64 MiB, anything
// else reads its body and answers its length.
func limitsOrigin(t *testing.T) *httptest.Server {
	t.Helper()
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/big") {
			chunk := make([]byte, 32<<10)
			for range (64 << 20) / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		fmt.Fprint(w, n)
	}))
	t.Cleanup(o.Close)
	return o
}

// routeLimits is the configuration of TestRouteLimits: "slow" (/slow/) waits 1 s for
// body progress, "dl" (/dl/) 1 s for each write; "rest" has the top level's 30 s and
// 60 s.
func routeLimits(originURL string) func(*config.Config) {
	return func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"o": {Targets: []string{originURL}}}
		c.Routes = []config.Route{
			{Name: "slow", Upstream: "o", Match: config.RouteMatch{PathPrefix: "/slow/"}, Limits: config.LimitsConfig{BodyReadTimeout: time.Second}},
			{Name: "dl", Upstream: "o", Match: config.RouteMatch{PathPrefix: "/dl/"}, Limits: config.LimitsConfig{WriteTimeout: time.Second}},
			{Name: "rest", Upstream: "o"},
		}
	}
}

// h1SlowPost sends a POST of n bytes to path over its own HTTP/1.1 connection, one
// byte per period, and returns the status and when it came, from the request's start.
func h1SlowPost(t *testing.T, addr, path string, n int, period time.Duration) (int, time.Duration) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n", path, n)
	sent := 0
	trickle(t, period, func(int) error {
		if sent == n {
			return io.EOF
		}
		sent++
		_, err := conn.Write([]byte("x"))
		return err
	})
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

// TestRouteLimits: a route's own limits apply to its requests and to no others, on
// every protocol. A body trickled at 5 bytes a second gets 408 after the "slow" route's
// 1 s, while the same trickle for 1.6 s reaches the upstream through "rest" (30 s). A
// client that reads nothing of a 64 MiB download through "dl" (write_timeout 1 s)
// loses it within a few seconds: on HTTP/2 the stream is reset and the connection
// serves the next request, on HTTP/3 the stream ends and the connection carries on,
// on HTTP/1.1 the connection is closed — where the top level's 60 s would have held
// them a minute.
func TestRouteLimits(t *testing.T) {
	t.Parallel()
	e := startEdge(t, routeLimits(limitsOrigin(t).URL))
	const d = time.Second
	t.Run("h1 body", func(t *testing.T) {
		t.Parallel()
		if code, took := h1SlowPost(t, e.Addr().String(), "/slow/up", 100, 200*time.Millisecond); code != http.StatusRequestTimeout || took < d || took > d+3*time.Second {
			t.Errorf("/slow/: %d after %v, want 408 within 3 s after %v", code, took, d)
		}
		if code, took := h1SlowPost(t, e.Addr().String(), "/rest/up", 8, 200*time.Millisecond); code != http.StatusOK {
			t.Errorf("/rest/: %d after %v, want 200: the slow route's timeout leaked", code, took)
		}
	})
	t.Run("h3 body", func(t *testing.T) {
		t.Parallel()
		tr := &http3.Transport{TLSClientConfig: insecureTLS.Clone()}
		defer tr.Close()
		for _, c := range []struct {
			path string
			n    int
			want int
		}{{"/slow/up", 100, http.StatusRequestTimeout}, {"/rest/up", 8, http.StatusOK}} {
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+c.path, &tricklingBody{ctx: ctx, n: c.n})
			req.ContentLength = int64(c.n)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				cancel()
				t.Fatalf("%s: %v", c.path, err)
			}
			resp.Body.Close()
			cancel()
			took := time.Since(start)
			if resp.StatusCode != c.want || c.want == http.StatusRequestTimeout && (took < d || took > d+3*time.Second) {
				t.Errorf("%s: %d after %v, want %d", c.path, resp.StatusCode, took, c.want)
			}
		}
	})
	t.Run("h2 write", func(t *testing.T) {
		t.Parallel()
		conn, fr := h2Dial(t, e.Addr().String())
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		// The connection's window is wide open: only the stream's 64 KiB holds the
		// download, as a client that stops reading one stream does.
		fr.WriteWindowUpdate(0, 1<<30)
		start := time.Now()
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: h2Block("GET", "/dl/big")})
		conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		for reset := false; ; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("reset %v: %v", reset, err)
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				if f.StreamID != 1 || reset {
					t.Fatalf("RST_STREAM of stream %d", f.StreamID)
				}
				reset = true
				if took := time.Since(start); took < d || took > d+3*time.Second {
					t.Errorf("stream reset after %v, want within 3 s after %v", took, d)
				}
				// The connection carries on.
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, EndHeaders: true, EndStream: true, BlockFragment: h2Block("GET", "/rest/x")})
			case *http2.MetaHeadersFrame:
				if f.StreamID == 3 {
					if st := f.PseudoValue("status"); st != "200" {
						t.Errorf("the next request on the connection: %s, want 200", st)
					}
					return
				}
			case *http2.GoAwayFrame:
				t.Fatalf("GOAWAY %v: the connection ended, not the stream", f.ErrCode)
			}
		}
	})
	t.Run("h3 write", func(t *testing.T) {
		t.Parallel()
		tr := &http3.Transport{TLSClientConfig: insecureTLS.Clone()}
		defer tr.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/dl/big", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		// Read nothing for write_timeout and a margin (the time is what is tested),
		// then everything there is.
		timer := time.NewTimer(d + 2*time.Second)
		<-timer.C
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil || n >= 64<<20 {
			t.Errorf("read %d bytes, %v: want the stream ended before its end", n, err)
		}
		t.Logf("read %d bytes before the stream ended: %v", n, err)
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/rest/x", nil)
		if resp, err := tr.RoundTrip(req); err != nil || resp.StatusCode != 200 {
			t.Errorf("the next request on the connection: %v %v, want 200", resp, err)
		} else {
			resp.Body.Close()
		}
	})
	t.Run("h1 write", func(t *testing.T) {
		t.Parallel()
		readSlowlyH1(t, e.Addr().String(), "/dl/big", d+2*time.Second)
	})
}

// TestSlowClients: issue 12's acceptance line for slow clients. 200 request bodies
// sent one byte a second from 20 sources (127.0.0.2–21: ten over HTTP/1.1 with ten
// connections each, ten over HTTP/2 with ten streams on one connection each) to a
// proxied route whose body_read_timeout is 2 s each get 408 after the timeout (within
// a loose margin), while a legitimate client on 127.0.0.1 posting to the same route
// gets every answer, and its p99 stays within max(250 ms, 10× its unloaded p99) — the
// issue's 1.5× only with H3EDGE_PERF=1.
func TestSlowClients(t *testing.T) {
	const (
		d       = 2 * time.Second
		sources = 20
		each    = 10
	)
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"o": {Targets: []string{limitsOrigin(t).URL}}}
		c.Routes = []config.Route{{Name: "upload", Upstream: "o", Limits: config.LimitsConfig{BodyReadTimeout: d}}}
	})
	legit := clientFor(t, "h2")
	post := func() (time.Duration, error) {
		start := time.Now()
		resp, err := legit.Post(e.url+"/upload/x", "text/plain", strings.NewReader("hello"))
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "5" {
			return 0, fmt.Errorf("%d %q %v, want 200 \"5\"", resp.StatusCode, body, err)
		}
		return time.Since(start), nil
	}
	p99 := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)*99/100]
	}
	for range 20 { // warm the connections up
		if _, err := post(); err != nil {
			t.Fatal(err)
		}
	}
	var unloaded []time.Duration
	for range 300 {
		took, err := post()
		if err != nil {
			t.Fatal(err)
		}
		unloaded = append(unloaded, took)
	}

	type result struct {
		source string
		status int
		took   time.Duration
		err    error
	}
	results := make(chan result, sources*each)
	started := make(chan struct{}, sources*each)
	stop := make(chan struct{})
	defer close(stop)
	for i := range sources {
		src := net.IPv4(127, 0, 0, byte(2+i))
		if i < sources/2 {
			for range each {
				go h1Trickle(e.Addr().String(), src, d+10*time.Second, stop, started, func(status int, took time.Duration, err error) {
					results <- result{src.String() + " h1", status, took, err}
				})
			}
		} else {
			go h2Trickle(e.Addr().String(), src, each, d+10*time.Second, stop, started, func(status int, took time.Duration, err error) {
				results <- result{src.String() + " h2", status, took, err}
			})
		}
	}
	for range sources * each {
		<-started
	}

	// The legitimate client posts until every slow body has its answer (bounded).
	var loaded []time.Duration
	failed := 0
	got := 0
	deadline := time.Now().Add(d + 15*time.Second)
	for got < sources*each && time.Now().Before(deadline) {
		select {
		case r := <-results:
			got++
			if r.err != nil || r.status != http.StatusRequestTimeout || r.took < d*9/10 || r.took > d+6*time.Second {
				t.Errorf("slow body from %s: %d after %v (%v), want 408 after about %v", r.source, r.status, r.took, r.err, d)
			}
			continue
		default:
		}
		if len(loaded) >= 20000 {
			<-results // enough samples: wait for the rest
			got++
			continue
		}
		took, err := post()
		if err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("legitimate request during the attack: %v", err)
			}
			continue
		}
		loaded = append(loaded, took)
	}
	if got < sources*each {
		t.Fatalf("only %d of %d slow bodies answered within %v", got, sources*each, d+15*time.Second)
	}
	if len(loaded) < 100 {
		t.Fatalf("only %d legitimate requests during the attack", len(loaded))
	}
	base, under := p99(unloaded), p99(loaded)
	t.Logf("legitimate p99 unloaded %v, during 200 slow bodies %v (%.2f×) over %d requests", base, under, float64(under)/float64(base), len(loaded))
	bound := max(250*time.Millisecond, 10*base)
	if os.Getenv("H3EDGE_PERF") == "1" {
		bound = base * 3 / 2
	}
	if under > bound {
		t.Errorf("legitimate p99 during the attack %v, want at most %v (unloaded %v)", under, bound, base)
	}
}

// tlsFrom opens a TLS connection to addr from the source address src, with ALPN proto.
func tlsFrom(addr string, src net.IP, proto string) (*tls.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
	return tls.DialWithDialer(&d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}})
}

// h1Trickle posts a 100-byte body from src over HTTP/1.1, one byte a second, and
// reports the answer's status and when it came. It signals started once the header
// section is sent and gives up after limit.
func h1Trickle(addr string, src net.IP, limit time.Duration, stop, started chan struct{}, report func(int, time.Duration, error)) {
	conn, err := tlsFrom(addr, src, "http/1.1")
	if err != nil {
		started <- struct{}{}
		report(0, 0, err)
		return
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /upload/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nx")
	started <- struct{}{}
	done := make(chan struct{})
	defer close(done)
	go everySecond(stop, done, func() bool {
		_, err := conn.Write([]byte("x"))
		return err == nil
	})
	conn.SetReadDeadline(start.Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		report(0, time.Since(start), err)
		return
	}
	resp.Body.Close()
	report(resp.StatusCode, time.Since(start), nil)
}

// everySecond calls f once a second until stop or done is closed or f returns false:
// the trickle of a slow body.
func everySecond(stop, done <-chan struct{}, f func() bool) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-done:
			return
		case <-tick.C:
			if !f() {
				return
			}
		}
	}
}

// h2Trickle posts n 100-byte bodies from src on one HTTP/2 connection, each one byte a
// second, and reports each answer as h1Trickle does.
func h2Trickle(addr string, src net.IP, n int, limit time.Duration, stop, started chan struct{}, report func(int, time.Duration, error)) {
	conn, err := tlsFrom(addr, src, "h2")
	if err != nil {
		for range n {
			started <- struct{}{}
			report(0, 0, err)
		}
		return
	}
	defer conn.Close()
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	start := time.Now()
	var mu sync.Mutex // the framer's writes; open
	open := map[uint32]bool{}
	for i := range n {
		id := uint32(2*i + 1)
		open[id] = true
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true,
			BlockFragment: h2Block("POST", "/upload/slow", hpack.HeaderField{Name: "content-length", Value: "100"})})
		fr.WriteData(id, false, []byte("x"))
		started <- struct{}{}
	}
	done := make(chan struct{})
	defer close(done)
	go everySecond(stop, done, func() bool {
		mu.Lock()
		for id := range open {
			fr.WriteData(id, false, []byte("x"))
		}
		mu.Unlock()
		return true
	})
	conn.SetReadDeadline(start.Add(limit))
	for left := n; left > 0; {
		f, err := fr.ReadFrame()
		if err != nil {
			for range left {
				report(0, time.Since(start), err)
			}
			return
		}
		var id uint32
		status := 0
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			id = f.StreamID
			status, _ = strconv.Atoi(f.PseudoValue("status"))
		case *http2.RSTStreamFrame:
			id = f.StreamID // ended without an answer: status 0
		default:
			continue
		}
		mu.Lock()
		was := open[id]
		delete(open, id)
		mu.Unlock()
		if was {
			left--
			report(status, time.Since(start), nil)
		}
	}
}

// BenchmarkChainRouted is BenchmarkChain with a route table of three routes (the
// request matching the last), a GET and a POST whose body the origin does not read:
// what the route step and the body timeout cost per request.
//
//	go test ./edge -run '^$' -bench ChainRouted -benchmem
func BenchmarkChainRouted(b *testing.B) {
	for _, method := range []string{"GET", "POST"} {
		b.Run(method, func(b *testing.B) {
			cfg := config.Default()
			cfg.Listen = "127.0.0.1:0"
			cfg.IP = roomyIP
			cfg.Policies = benchPolicies
			cfg.Upstreams = map[string]config.Upstream{"o": {Targets: []string{"http://127.0.0.1:9"}}}
			cfg.Routes = []config.Route{
				{Name: "a", Upstream: "o", Match: config.RouteMatch{PathPrefix: "/a/"}},
				{Name: "b", Upstream: "o", Match: config.RouteMatch{PathPrefix: "/b/"}},
				{Name: "rest", Upstream: "o"},
			}
			benchChain(b, cfg, func() *http.Request {
				r := httptest.NewRequestWithContext(identity.WithMemo(context.Background()), method, "https://api.example/v1/items", nil)
				if method == "POST" {
					r.Body, r.ContentLength = io.NopCloser(strings.NewReader("x")), 1
				}
				r.RemoteAddr = "192.0.2.7:40000"
				r.Header.Set("X-API-Key", "k-000042")
				return r
			})
		})
	}
}

// TestReloadRouteLimits: a reload applies a route's new body_read_timeout to the next
// request, and refuses a route's write_timeout longer than the top level's, naming it,
// with the old limits kept.
func TestReloadRouteLimits(t *testing.T) {
	t.Parallel()
	o := limitsOrigin(t)
	yaml := func(limits string) string {
		return "listen: \"127.0.0.1:0\"\nadmin: {listen: \"127.0.0.1:0\"}\nupstreams: {o: {targets: [" + o.URL + "]}}\n" +
			"routes: [{name: up, upstream: o, limits: " + limits + "}]\n"
	}
	e, file := startEdgeFile(t, yaml("{body_read_timeout: 10s}"))
	// 8 bytes over 1.6 s: within 10 s.
	if code, took := h1SlowPost(t, e.Addr().String(), "/x", 8, 200*time.Millisecond); code != http.StatusOK {
		t.Fatalf("before the reload: %d after %v, want 200", code, took)
	}
	os.WriteFile(file, []byte(yaml("{body_read_timeout: 1s}")), 0o644)
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, took := h1SlowPost(t, e.Addr().String(), "/x", 100, 200*time.Millisecond); code != http.StatusRequestTimeout || took > 4*time.Second {
		t.Fatalf("after the reload: %d after %v, want 408 after about 1 s", code, took)
	}
	os.WriteFile(file, []byte(yaml("{body_read_timeout: 10s, write_timeout: 2m}")), 0o644)
	err := e.Reload()
	if err == nil || !strings.Contains(err.Error(), "routes[0].limits.write_timeout") {
		t.Fatalf("reload with a route write_timeout over the top level's: %v, want it refused by name", err)
	}
	if code, took := h1SlowPost(t, e.Addr().String(), "/x", 100, 200*time.Millisecond); code != http.StatusRequestTimeout || took > 4*time.Second {
		t.Errorf("after the refused reload: %d after %v, want the 1 s in force", code, took)
	}
}
