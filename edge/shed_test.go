package edge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
)

// holdSlow starts n requests to /slow?ms=ms on c and returns a function that waits
// for them and returns their statuses (0 for an error).
func holdSlow(t *testing.T, c *http.Client, url string, n, ms int) func() []int {
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := c.Get(url + "/slow?ms=" + itoa(ms))
			if err != nil {
				t.Logf("slow request %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	return func() []int { wg.Wait(); return statuses }
}

// wantShed checks that resp is the edge's shed answer: 503, Retry-After: 1, the
// prebuilt problem document.
func wantShed(t *testing.T, what string, resp *http.Response, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want 503", what, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s: %d, Retry-After %q, %s; want the shed 503", what, resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// TestMaxInflightRequests: with limits.max_inflight_requests: 3 and three slow
// requests held, one from each of three sources (one source may hold only its share,
// TestInflightShare), a fourth on every protocol gets 503 with Retry-After before any
// origin sees it; the three finish with 200, and then the edge serves again.
func TestMaxInflightRequests(t *testing.T) {
	e := startEdge(t, func(c *config.Config) { c.Limits.MaxInflightRequests = 3 })
	var waits []func() []int
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		c, err := newSourceClient(t, "h2", src).dial(e.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, holdSlow(t, c, e.url, 1, 1500))
	}
	testkit.WaitFor(t, 5*time.Second, "three requests in flight", func() bool { return e.inflight.Load() == 3 })
	for _, p := range protos {
		resp, err := clientFor(t, p.name).Get(e.url + "/")
		wantShed(t, p.name+" request over the cap", resp, err)
	}
	for i, wait := range waits {
		if st := wait()[0]; st != http.StatusOK {
			t.Errorf("held request %d: %d, want 200", i, st)
		}
	}
	for _, p := range protos {
		if resp, err := clientFor(t, p.name).Get(e.url + "/"); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s after the held requests: %v %v", p.name, resp, err)
		} else {
			resp.Body.Close()
		}
	}
}

// TestOverloadShedding puts the edge over limits.max_goroutines while it holds real
// slow requests and checks the cheapest refusal at every layer while it is there — a
// new QUIC connection refused (CONNECTION_REFUSED), a new TCP connection reset at
// accept, a new request on an open connection answered 503 with Retry-After — that
// what it admitted is served to the end, and that it serves again once the load is
// gone. The cap comes by reload once every held request is in flight: set at start, the
// sampler could pass it while the held requests still arrive, and shed some of them.
func TestOverloadShedding(t *testing.T) {
	const held = 150
	yaml := `
listen: "127.0.0.1:0"
admin: {listen: "127.0.0.1:0"}
ip: {streams: {rate: 100000, burst: 100000}, connections: {rate: 100000, burst: 100000},
     max_streams_per_connection: 1000} # the held requests share one HTTP/2 connection
`
	e, file := startEdgeFile(t, yaml)
	h2 := clientFor(t, "h2")
	if resp, err := h2.Get(e.url + "/"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	wait := holdSlow(t, h2, e.url, held, 5000)
	testkit.WaitFor(t, 5*time.Second, "every held request in flight", func() bool { return e.inflight.Load() == held })
	// A handler goroutine each in the edge and a caller each in this process: the count
	// now is well over 100 above what it falls back to when they end.
	bound := runtime.NumGoroutine() - 100
	if err := os.WriteFile(file, []byte(yaml+"limits: {max_goroutines: "+itoa(bound)+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.reloadConfig(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "shedding over max_goroutines", e.shedder.Shedding)
	t.Logf("shedding at %d goroutines (bound %d)", e.shedder.Stats().Goroutines, bound)

	resp, err := h2.Get(e.url + "/")
	wantShed(t, "h2 request on an open connection", resp, err)
	if resp, err := clientFor(t, "h1").Get(e.url + "/"); err == nil {
		resp.Body.Close()
		t.Errorf("new TCP connection while overloaded: %d, want a reset", resp.StatusCode)
	}
	if e.tcp.Refused().Overload == 0 {
		t.Error("no TCP connection counted as refused for overload")
	}
	var te *quic.TransportError
	_, err = clientFor(t, "h3").Get(e.url + "/")
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Errorf("new QUIC connection while overloaded: %v, want CONNECTION_REFUSED", err)
	}

	for i, st := range wait() {
		if st != http.StatusOK {
			t.Errorf("held request %d: %d, want 200 (admitted work is served)", i, st)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "shedding ends with the load", func() bool { return !e.shedder.Shedding() })
	for _, p := range protos {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/", nil)
		if resp, err := clientFor(t, p.name).Do(req); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s after the overload: %v %v", p.name, resp, err)
		} else {
			resp.Body.Close()
		}
		cancel()
	}
}

// TestInflightShare: one source holding slow requests gets at most half of
// limits.max_inflight_requests (its share while it is the only source holding any);
// its requests past that are shed with the 503 and charge it a rejection each, so
// that it is banned past abuse.rejections; a client on another address is served all
// along. Before the share, the hog filled the cap and every other client got 503,
// charged to nobody.
func TestInflightShare(t *testing.T) {
	t.Parallel()
	const capped = 20
	e := startEdge(t, func(c *config.Config) { c.Limits.MaxInflightRequests = capped })
	hogAddr := netip.MustParseAddr("127.0.0.2")
	hog, err := newSourceClient(t, "h2", hogAddr.String()).dial(e.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	hog.Timeout = 30 * time.Second // past the held requests' 20 s
	// Its one connection, for all its requests.
	if resp, err := hog.Get(e.url + "/"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	held := holdSlow(t, hog, e.url, capped/2, 20000)
	testkit.WaitFor(t, 5*time.Second, "half the cap held", func() bool { return e.inflight.Load() == capped/2 })

	// Ten more: shed at once with the share, held up to the cap without it.
	var answered atomic.Int32
	extra := make([]int, capped/2)
	for i := range extra {
		go func() {
			if resp, err := hog.Get(e.url + "/slow?ms=20000"); err == nil {
				resp.Body.Close()
				extra[i] = resp.StatusCode
			}
			answered.Add(1)
		}()
	}
	testkit.WaitFor(t, 5*time.Second, "the hog's ten more requests answered or held", func() bool {
		return answered.Load() == capped/2 || e.inflight.Load() == capped
	})
	if answered.Load() == capped/2 {
		for i, st := range extra {
			if st != http.StatusServiceUnavailable {
				t.Errorf("hog's request %d past half the cap: %d, want 503", capped/2+i, st)
			}
		}
	} else {
		t.Error("the hog holds the whole cap")
	}
	for _, p := range protos {
		resp, err := clientFor(t, p.name).Get(e.url + "/")
		if err != nil {
			t.Errorf("%s from another source while the hog holds its share: %v, want 200", p.name, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s from another source while the hog holds its share: %d, want 200", p.name, resp.StatusCode)
		}
	}

	// Each shed request charged the hog: it is banned past abuse.rejections (50), and
	// its connection closed.
	n := 0
	for ; n < 60 && !e.box.Banned(hogAddr); n++ {
		resp, err := hog.Get(e.url + "/")
		if err != nil {
			break // the ban closed the connection
		}
		wantShed(t, "hog's request over its share", resp, err)
	}
	if !e.box.Banned(hogAddr) {
		t.Fatalf("%d more requests shed, the hog is not banned", n)
	}
	t.Logf("banned after %d more requests over its share", n)
	held()
	if e.box.Banned(loopback) {
		t.Error("the other client is banned")
	}
}
