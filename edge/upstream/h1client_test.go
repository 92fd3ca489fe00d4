package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestH1ClientTimeout: an origin that never answers costs the pool's Timeout, reported
// as ErrTimeout (the edge's 504), not a hang and not a 502.
func TestH1ClientTimeout(t *testing.T) {
	release := make(chan struct{})
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	t.Cleanup(o.Close)
	t.Cleanup(func() { close(release) })
	errc := make(chan error, 1)
	p := newPool(t, Config{Timeout: 150 * time.Millisecond, Targets: []Target{tgt(t, o.URL, 1)},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { errc <- err; w.WriteHeader(504) }})
	url := front(t, p)
	start := time.Now()
	_, code := get(t, http.DefaultClient, mustReq(t, "GET", url+"/", nil))
	if d := time.Since(start); code != 504 || d < 150*time.Millisecond || d > 3*time.Second {
		t.Fatalf("status %d after %v, want 504 after the 150ms timeout", code, d)
	}
	if err := <-errc; !errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want ErrTimeout", err)
	}
}

// TestH1ClientClientGone: a client that goes away mid-response ends the exchange
// with the origin at once (its request context ends), as net/http's Transport does,
// rather than when the origin writes again.
func TestH1ClientClientGone(t *testing.T) {
	originDone := make(chan struct{})
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the edge closed the connection
		close(originDone)
	}))
	t.Cleanup(o.Close)
	url := front(t, newPool(t, Config{Targets: []Target{tgt(t, o.URL, 1)}}))
	req := mustReq(t, "GET", url+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event %q, %v: the stream was not flushed", line, err)
	}
	resp.Body.Close() // the client goes away
	select {
	case <-originDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the origin's request did not end after the client went away")
	}
}

// TestH1ClientStaleConnection: an origin that closes a keep-alive connection after
// each answer (without saying so) does not fail the next request: it is sent again
// on a new connection, as net/http's Transport does.
func TestH1ClientStaleConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()
	url := front(t, newPool(t, Config{Targets: []Target{tgt(t, "http://"+ln.Addr().String(), 1)}}))
	for i := range 20 {
		if _, code := get(t, http.DefaultClient, mustReq(t, "GET", url+"/", nil)); code != 200 {
			t.Fatalf("request %d: status %d", i, code)
		}
	}
	if n := conns.Load(); n < 20 {
		t.Fatalf("%d connections for 20 requests: the origin's closes were not seen", n)
	}
}

// TestH1ClientCapShared: MaxConnections holds across both legs of h1Client: requests
// it carries itself and requests with streamed bodies it gives net/http's Transport
// never have more than the cap open to the target at once.
func TestH1ClientCapShared(t *testing.T) {
	// Requests are counted inside the handler: the count drops before the answer
	// leaves (it is buffered), so a connection freed by an answer cannot overlap the
	// next one in the count. Each request has a connection of its own to the target.
	var (
		mu         sync.Mutex
		open, peak int
	)
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		open++
		peak = max(peak, open)
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		time.Sleep(5 * time.Millisecond) // a slow answer, so that requests overlap
		io.WriteString(w, "ok")
		mu.Lock()
		open--
		mu.Unlock()
	}))
	o.Start()
	t.Cleanup(o.Close)
	url := front(t, newPool(t, Config{MaxConnections: 2, Targets: []Target{tgt(t, o.URL, 1)}}))
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			var body io.Reader
			if i%2 == 1 {
				body = io.MultiReader(strings.NewReader("streamed body")) // unknown length: the fallback
			}
			if _, code := get(t, http.DefaultClient, mustReq(t, "POST", url+"/", body)); code != 200 {
				t.Errorf("status %d", code)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if p := peak; p > 2 {
		t.Errorf("%d connections open at once to the target, want at most 2", p)
	}
}

// TestH1ClientBodyOutlivesTimeout: the timeout bounds the wait for a response header
// only. On a connection whose last response came whole with its header (which leaves
// that header's deadline on the connection), a body that streams for longer than the
// timeout arrives whole, and a streamed body is not cut either.
func TestH1ClientBodyOutlivesTimeout(t *testing.T) {
	const timeout = 150 * time.Millisecond
	var conns atomic.Int32
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		<-time.After(3 * timeout) // the rest comes after the header's deadline passed
		io.WriteString(w, "-last")
	}))
	o.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	url := front(t, newPool(t, Config{Timeout: timeout, MaxConnections: 1, Targets: []Target{tgt(t, o.URL, 1)}}))
	for _, path := range []string{"/small", "/slow", "/small", "/small", "/slow"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := "ok"
		if path == "/slow" {
			want = "first-last"
		}
		if err != nil || resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("%s: status %d body %q (%v), want 200 %q", path, resp.StatusCode, body, err, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections to the origin, want 1 (kept alive throughout)", n)
	}
}

// TestH1ClientLargeHead: a request head larger than the socket buffers (4 KiB on both
// ends) goes out in several writes: the origin sees it whole, the response is read,
// the connection kept.
func TestH1ClientLargeHead(t *testing.T) {
	big := strings.Repeat("x", 600<<10)
	var conns atomic.Int32
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Origin", strconv.Itoa(len(r.Header.Get("X-Big"))))
	}))
	o.Config.MaxHeaderBytes = 2 << 20
	o.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	// Small socket buffers on both ends, so that the head cannot go out in one write.
	small := func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}
	ln, err := (&net.ListenConfig{Control: small}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.Listener.Close()
	o.Listener = ln
	o.Start()
	t.Cleanup(o.Close)
	newTransport := func(tg Target, cfg *Config) Transport {
		c := DefaultTransport(tg, cfg).(*h1Client)
		c.dialer.Control = small
		return c
	}
	s := httptest.NewUnstartedServer(newPool(t, Config{Timeout: 5 * time.Second, NewTransport: newTransport,
		Targets: []Target{tgt(t, "http://"+ln.Addr().String(), 1)}}))
	s.Config.MaxHeaderBytes = 2 << 20
	s.Start()
	t.Cleanup(s.Close)
	for i, size := range []int{len(big), 0, len(big), 0} {
		req := mustReq(t, "GET", s.URL+"/", nil)
		if size > 0 {
			req.Header.Set("X-Big", big)
		}
		body, code := get(t, http.DefaultClient, req)
		if code != 200 || body != strconv.Itoa(size) {
			t.Fatalf("request %d: status %d, origin saw an X-Big of %q bytes, want 200 and %d", i, code, body, size)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections to the origin, want 1 (kept alive throughout)", n)
	}
}

// TestH1ClientGoneBeforeHeader: a client that goes away while the origin has not
// answered yet ends the wait for the header (the context's watch, armed watchDelay
// after the start, fails the read), and the connection to the origin is closed.
func TestH1ClientGoneBeforeHeader(t *testing.T) {
	arrived, originDone := make(chan struct{}), make(chan struct{})
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // the edge closed the connection
		close(originDone)
	}))
	t.Cleanup(o.Close)
	url := front(t, newPool(t, Config{Timeout: time.Minute, Targets: []Target{tgt(t, o.URL, 1)}}))
	ctx, cancel := context.WithCancel(context.Background())
	req := mustReq(t, "GET", url+"/wait", nil).WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	cancel()
	select {
	case <-originDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the origin's connection was still open 5 s after the client went away")
	}
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
}

// TestH1ClientCancelledBeforeWatch: a request whose context ends before its watch is
// armed (within watchDelay), answered chunked in one segment, must not leave its
// connection idle with the deadline in the past: the next request, a POST that is
// not resent, would fail on it.
func TestH1ClientCancelledBeforeWatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	arrived, release := make(chan struct{}), make(chan struct{})
	go func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn, first bool) {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if first && n == 0 {
						close(arrived)
						<-release
						io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
						continue
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}(c, first)
		}
	}()
	c := &h1Client{addr: ln.Addr().String(), fallback: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ln.Addr().String()+"/", nil)
	go func() {
		<-arrived
		cancel() // the origin answers only after this
		close(release)
	}()
	resp, err := c.roundTripBy(req, time.Now().Add(10*time.Second), nil)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	c.mu.Lock()
	idle := len(c.idle)
	c.mu.Unlock()
	if idle != 0 {
		t.Errorf("%d connections idle after a cancelled request, want 0", idle)
	}
	req2, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/", strings.NewReader("data"))
	resp2, err := c.roundTripBy(req2, time.Now().Add(10*time.Second), nil)
	if err != nil {
		t.Fatalf("the next request: %v", err)
	}
	resp2.Body.Close()
}
