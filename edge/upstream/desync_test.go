package upstream

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawOrigin is an origin on loopback that writes what serve writes: serve gets each
// connection it accepts, numbered from 0, on a goroutine of its own, and the
// connection is closed when serve returns. It returns the origin's URL.
func rawOrigin(t *testing.T, serve func(n int, c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(n, c, bufio.NewReader(c))
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// scriptedOrigin answers its first request with first, waits for more (if not nil)
// and writes what it gets unasked, then answers every later request "real".
func scriptedOrigin(t *testing.T, first string, more chan string, wrote chan struct{}) string {
	return rawOrigin(t, func(n int, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			if n > 0 || i > 0 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal")
				continue
			}
			io.WriteString(c, first)
			if more != nil {
				go func() {
					io.WriteString(c, <-more) // unasked, while the connection is idle
					close(wrote)
				}()
			}
		}
	})
}

const injected = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED"

// An origin that sends more than its response (bytes past Content-Length, a body on
// a 204 or 304, a 101 to a plain request, a second response later while the
// connection is idle) must not have those bytes read as the next client's response:
// the connection is closed, and the next request gets a new one.
func TestOriginExtraBytesNotAnotherResponse(t *testing.T) {
	for _, tc := range []struct {
		name, first string
		later       bool
	}{
		{"past content-length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + injected, false},
		{"body on 204", "HTTP/1.1 204 No Content\r\n\r\n" + injected, false},
		{"body on 304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n" + injected, false},
		{"101 to a plain request", "HTTP/1.1 101 Switching Protocols\r\n\r\n" + injected, false},
		{"sent while idle", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var more chan string
			var wrote chan struct{}
			if tc.later {
				more, wrote = make(chan string), make(chan struct{})
			}
			url := front(t, newPool(t, Config{Targets: []Target{tgt(t, scriptedOrigin(t, tc.first, more, wrote), 1)}}))
			c := &http.Client{}
			t.Cleanup(c.CloseIdleConnections)
			get(t, c, mustReq(t, "GET", url+"/first", nil))
			if tc.later {
				more <- injected
				<-wrote // on loopback the bytes are in h3edge's socket once written
			}
			resp, err := c.Get(url + "/victim")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "real" {
				t.Errorf("the next request got %d %q, want 200 \"real\" from a new connection", resp.StatusCode, b)
			}
			if strings.Contains(string(b), "INJECTED") || resp.Header.Get("Content-Length") == "8" {
				t.Errorf("the origin's unasked bytes were read as the next request's response")
			}
		})
	}
}

// More than max1xx informational responses before the final one: the exchange fails
// (502), as net/http's Transport fails it, instead of relaying them without end.
func TestTooMany1xx(t *testing.T) {
	first := strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n", max1xx+1) +
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	url := front(t, newPool(t, Config{Targets: []Target{tgt(t, scriptedOrigin(t, first, nil, nil), 1)}}))
	if _, code := get(t, http.DefaultClient, mustReq(t, "GET", url+"/", nil)); code != http.StatusBadGateway {
		t.Errorf("%d informational responses: status %d, want 502", max1xx+1, code)
	}
	first = strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", max1xx) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	url = front(t, newPool(t, Config{Targets: []Target{tgt(t, scriptedOrigin(t, first, nil, nil), 1)}}))
	if _, code := get(t, http.DefaultClient, mustReq(t, "GET", url+"/", nil)); code != http.StatusOK {
		t.Errorf("%d informational responses: status %d, want 200", max1xx, code)
	}
}

// BenchmarkPeekIdle is alive's check of an idle loopback connection, made before each
// reuse: one system call, no allocation.
func BenchmarkPeekIdle(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	peek := newPeek(nc)
	b.ReportAllocs()
	for b.Loop() {
		if idle, err := peek(); !idle || err != nil {
			b.Fatal("an idle connection reported busy or closed")
		}
	}
}

// A connection whose last request's header deadline (left in place when the body came
// with the header) passed while it was idle is still reused: the check before reuse
// tells the deadline from the origin's close.
func TestReuseAfterDeadlinePassed(t *testing.T) {
	accepted := make(chan struct{}, 10)
	origin := rawOrigin(t, func(_ int, c net.Conn, br *bufio.Reader) {
		accepted <- struct{}{}
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	const timeout = 20 * time.Millisecond
	url := front(t, newPool(t, Config{Timeout: timeout, Targets: []Target{tgt(t, origin, 1)}}))
	c := &http.Client{}
	t.Cleanup(c.CloseIdleConnections)
	get(t, c, mustReq(t, "GET", url+"/", nil))
	time.Sleep(2 * timeout) // the condition under test: the deadline left in place passes
	if _, code := get(t, c, mustReq(t, "GET", url+"/", nil)); code != 200 {
		t.Fatalf("second request: %d", code)
	}
	if n := len(accepted); n != 1 {
		t.Errorf("the origin accepted %d connections, want 1: the idle connection was not reused", n)
	}
}

// An idle connection the origin closed is not reused for a request with a body (which
// could not be sent again): the check before reuse sees the close.
func TestClosedIdleNotReused(t *testing.T) {
	closed := make(chan struct{})
	origin := rawOrigin(t, func(n int, c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err == nil {
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		if n > 0 {
			br.ReadByte() // the client's close
			return
		}
		c.Close() // a keep-alive timeout, without a word
		close(closed)
	})
	url := front(t, newPool(t, Config{Targets: []Target{tgt(t, origin, 1)}}))
	c := &http.Client{}
	t.Cleanup(c.CloseIdleConnections)
	get(t, c, mustReq(t, "GET", url+"/", nil))
	<-closed // on loopback the FIN is in h3edge's socket once close returns
	if _, code := get(t, c, mustReq(t, "POST", url+"/", strings.NewReader("hello"))); code != 200 {
		t.Errorf("a POST after the origin closed the idle connection: %d, want 200 on a new connection", code)
	}
}

// A request the origin read and then closed the reused connection on, answering
// nothing, is sent again only when it may be sent twice: a GET is, a POST (even
// without a body) is not, as net/http's Transport decides.
func TestNoResendOfNonIdempotent(t *testing.T) {
	for _, tc := range []struct {
		method, key string
		want        int // status
		seen        int // times the origin read the second request
	}{
		{"GET", "", 200, 2},
		{"POST", "", 502, 1},
		{"POST", "k1", 200, 2},
	} {
		t.Run(tc.method+tc.key, func(t *testing.T) {
			seen := make(chan string, 10)
			origin := rawOrigin(t, func(n int, c net.Conn, br *bufio.Reader) {
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.URL.Path == "/second" {
						seen <- req.Method
					}
					if n == 0 && i == 1 {
						return // read, then closed unanswered
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			url := front(t, newPool(t, Config{Targets: []Target{tgt(t, origin, 1)}}))
			c := &http.Client{}
			t.Cleanup(c.CloseIdleConnections)
			get(t, c, mustReq(t, "GET", url+"/first", nil))
			req := mustReq(t, tc.method, url+"/second", nil)
			if tc.key != "" {
				req.Header.Set("Idempotency-Key", tc.key)
			}
			if _, code := get(t, c, req); code != tc.want {
				t.Errorf("status %d, want %d", code, tc.want)
			}
			if n := len(seen); n != tc.seen {
				t.Errorf("the origin read the request %d times, want %d", n, tc.seen)
			}
		})
	}
}

// A response header without end is read to 1 MiB, not into memory for ever: 502, and
// the origin's writes stop there. The 1xx responses before it count in the same bound.
func TestEndlessResponseHeader(t *testing.T) {
	for _, start := range []string{"HTTP/1.1 200 OK\r\nX-Big: ", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", 5) + "HTTP/1.1 200 OK\r\nX-Big: "} {
		sent := make(chan int64, 1)
		origin := rawOrigin(t, func(_ int, c net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, start)
			var n int64
			chunk := []byte(strings.Repeat("a", 64<<10))
			c.SetWriteDeadline(time.Now().Add(10 * time.Second)) // bounded, whatever the edge does
			for n < 64<<20 {
				k, err := c.Write(chunk)
				n += int64(k)
				if err != nil {
					break
				}
			}
			sent <- n
		})
		url := front(t, newPool(t, Config{Targets: []Target{tgt(t, origin, 1)}}))
		c := &http.Client{}
		t.Cleanup(c.CloseIdleConnections)
		if _, code := get(t, c, mustReq(t, "GET", url+"/", nil)); code != http.StatusBadGateway {
			t.Errorf("an endless response header: %d, want 502", code)
		}
		// What the kernel's buffers took beyond what the edge read is a few MiB on loopback.
		if n := <-sent; n > 16<<20 {
			t.Errorf("the origin wrote %d MiB of one header before the edge stopped reading", n>>20)
		}
	}
}
