package upstream

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestUploadEndAfterTheHeaderKeepsTheStream: an origin that answers at once and streams
// its body for longer than the pool's timeout, while the client's upload ends after the
// header came, is passed on whole: the body keeps coming, well within read_timeout. The
// try's header timer was re-armed by the upload's later reads, so the try was cut one
// timeout after the upload's end, in the middle of a healthy stream (a gRPC bidi call
// one timeout after its client's CloseSend).
func TestUploadEndAfterTheHeaderKeepsTheStream(t *testing.T) {
	const timeout = 300 * time.Millisecond
	origin := func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		io.Copy(io.Discard, r.Body) // the upload, to its end
		for range 10 {              // then a byte every 100 ms: a healthy stream
			w.Write([]byte("x"))
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}
	// http: h1Client's fallback (a body of unknown length); h2c: Pool.try's own timer.
	for _, target := range []string{"http", "h2c"} {
		t.Run(target, func(t *testing.T) {
			p := newPool(t, Config{Targets: []Target{tgt(t, startTarget(t, http.HandlerFunc(origin), target), 1)}, Timeout: timeout, ReadTimeout: 5 * time.Second})
			t.Cleanup(p.Close)
			front := frontOf(t, p, "HTTP/2")
			pr, pw := io.Pipe()
			go pw.Write([]byte("hello"))
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, front.URL+"/stream", pr)
			start := time.Now()
			resp, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			pw.Close() // the upload ends once the header has come
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(got) != "xxxxxxxxxx" {
				t.Fatalf("a body streaming within read_timeout: %q, %v after %v; want 10 bytes, whole (%s)", got, err, time.Since(start).Round(time.Millisecond), fmt.Sprint(p.Stats()))
			}
		})
	}
}

// TestHalfClosedTunnelPassesALiveAnswer: a client that ends its side of an upgraded
// connection (its request all sent, as docker attach's stdin or a WebSocket client
// after its close frame) while the origin goes on answering, a byte every 100 ms for
// 1.5 s: each wait is far below the pool's timeout (500 ms), so the answer passes
// whole. The linger after a half-close bounds a peer's silence, not the tunnel's rest:
// a fixed deadline cut this answer at 500 ms with what looked like a clean end.
func TestHalfClosedTunnelPassesALiveAnswer(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
		io.Copy(io.Discard, brw.Reader) // the client's side, to its end (the FIN)
		for range 15 {
			if _, err := c.Write([]byte("o")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}))
	t.Cleanup(o.Close)
	p := newPool(t, Config{Targets: []Target{tgt(t, o.URL, 1)}, Timeout: 500 * time.Millisecond})
	front := front(t, p)
	conn, err := net.Dial("tcp", strings.TrimPrefix(front, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST /attach HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v, %v", resp, err)
	}
	io.WriteString(conn, "stdin")
	conn.(*net.TCPConn).CloseWrite()
	start := time.Now()
	got, err := io.ReadAll(br)
	if string(got) != strings.Repeat("o", 15) {
		t.Fatalf("after the client's FIN: %q (%v) after %v; want the origin's whole answer (15 bytes, one every 100 ms)", got, err, time.Since(start).Round(time.Millisecond))
	}
}

// TestStalledErrorBodyDoesNotHoldTheRetry: a GET answered 503 by a target that sends
// 10 bytes of its 100-byte body and then stalls is retried on the other target at once:
// the failed answer's body is given drainWait, not read_timeout (20 s here), which
// held every such retry. A 503 whose body comes whole keeps its HTTP/1.1 connection
// for the next request.
func TestStalledErrorBodyDoesNotHoldTheRetry(t *testing.T) {
	stalled := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("0123456789"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest never comes
	}
	for _, target := range []string{"http", "h2c"} {
		t.Run(target, func(t *testing.T) {
			bad := startTarget(t, http.HandlerFunc(stalled), target)
			good := startOrigin(t, "good", nil)
			url := front(t, newPool(t, Config{Retries: 1, ReadTimeout: 20 * time.Second,
				Targets: []Target{tgt(t, bad, 1), tgt(t, good.URL, 1)}}))
			for i := range 2 {
				start := time.Now()
				o, code := get(t, http.DefaultClient, mustReq(t, "GET", url+"/", nil))
				took := time.Since(start)
				if code != 200 || o != "good" {
					t.Fatalf("GET %d: %d from %q, want 200 from good", i, code, o)
				}
				if took > 5*time.Second {
					t.Fatalf("GET %d: the retry came after %v: held by the failed answer's stalled body", i, took.Round(time.Millisecond))
				}
			}
		})
	}
	t.Run("whole", func(t *testing.T) {
		var conns atomic.Int32
		bad := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("busy"))
		}))
		bad.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		bad.Start()
		t.Cleanup(bad.Close)
		good := startOrigin(t, "good", nil)
		url := front(t, newPool(t, Config{Retries: 1, Targets: []Target{tgt(t, bad.URL, 1), tgt(t, good.URL, 1)}}))
		for i := range 2 * minRetries { // every other one retried: within the budget's floor
			if o, code := get(t, http.DefaultClient, mustReq(t, "GET", url+"/", nil)); code != 200 || o != "good" {
				t.Fatalf("GET %d: %d from %q, want 200 from good", i, code, o)
			}
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("the 503 target saw %d connections for %d requests, want 1: its drained connection kept", n, minRetries)
		}
	})
}
