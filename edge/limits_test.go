package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/h3edge/h3edge/edge/config"
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
		dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}}
		conn, err := tls.DialWithDialer(&dialer, "tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /dl/big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		timer := time.NewTimer(d + 2*time.Second)
		<-timer.C
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, conn)
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Fatalf("still open 10 s after the client began reading (%d bytes read)", n)
		}
		if n >= 64<<20 {
			t.Errorf("read all %d bytes: the connection was not cut", n)
		}
		t.Logf("read %d bytes before the close (%v)", n, err)
	})
}
