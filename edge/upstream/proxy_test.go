package upstream

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startTarget serves origin on a loopback listener as a target of the given kind,
// "http" or "h2c" (HTTP/2 without TLS), and returns the target's URL.
func startTarget(t *testing.T, origin http.Handler, target string) string {
	o := httptest.NewUnstartedServer(origin)
	u := "http://"
	if target == "h2c" {
		var protos http.Protocols
		protos.SetUnencryptedHTTP2(true)
		o.Config.Protocols = &protos
		u = "h2c://"
	}
	o.Start()
	t.Cleanup(o.Close)
	return u + o.Listener.Addr().String()
}

// frontOf serves h on a real loopback listener over proto (HTTP/1.1, or HTTP/2 with
// TLS), as the edge does.
func frontOf(t *testing.T, h http.Handler, proto string) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	if proto == "HTTP/2" {
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// eachLeg runs f for the pool's loop and for ReverseProxy (the reference: the test's
// expectations hold for the leg before too), to an http:// and an h2c:// target, from
// HTTP/1.1 and HTTP/2 clients. origin is the target's handler.
func eachLeg(t *testing.T, origin http.HandlerFunc, f func(t *testing.T, front *httptest.Server)) {
	for _, target := range []string{"http", "h2c"} {
		for _, leg := range []string{"loop", "reverseproxy"} {
			for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
				t.Run(target+"/"+leg+"/"+proto, func(t *testing.T) {
					p := newPool(t, Config{Targets: []Target{tgt(t, startTarget(t, origin, target), 1)}})
					t.Cleanup(p.Close)
					var h http.Handler = p
					if leg == "reverseproxy" {
						h = referenceProxy(p)
					}
					f(t, frontOf(t, h, proto))
				})
			}
		}
	}
}

// TestProxyFlushesStreams: an event stream (even of known length), a body of unknown
// length, and the header of one that has no byte yet reach the client while the origin
// waits for the client to have seen them.
func TestProxyFlushesStreams(t *testing.T) {
	for _, kind := range []string{"event-stream", "unknown-length", "header-only"} {
		t.Run(kind, func(t *testing.T) {
			seen := make(chan struct{}, 1)
			origin := func(w http.ResponseWriter, r *http.Request) {
				first := "data: 1\n\n"
				rest := strings.Repeat("data: more\n\n", 100)
				switch kind {
				case "event-stream":
					w.Header().Set("Content-Type", "Text/Event-Stream; charset=utf-8")
					w.Header().Set("Content-Length", strconv.Itoa(len(first)+len(rest)))
				case "header-only":
					first = ""
				}
				w.WriteHeader(http.StatusOK)
				io.WriteString(w, first)
				w.(http.Flusher).Flush()
				select {
				case <-seen:
				case <-time.After(10 * time.Second):
					t.Errorf("%s: the client did not see the first part within 10s: not flushed", kind)
				}
				io.WriteString(w, rest)
			}
			eachLeg(t, origin, func(t *testing.T, front *httptest.Server) {
				resp, err := front.Client().Get(front.URL + "/events")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				br := bufio.NewReader(resp.Body)
				if kind != "header-only" {
					if line, err := br.ReadString('\n'); err != nil || line != "data: 1\n" {
						t.Fatalf("first line %q, %v", line, err)
					}
				}
				seen <- struct{}{}
				rest, err := io.ReadAll(br)
				if err != nil || !strings.HasSuffix(string(rest), "data: more\n\n") {
					t.Fatalf("the rest: %d bytes, %v", len(rest), err)
				}
			})
		})
	}
}

// TestProxyAbortsMidBody: an origin whose response breaks off midway — of known length
// or chunked — gives the client a broken response (a reset stream, a closed
// connection), never one that looks whole.
func TestProxyAbortsMidBody(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run("chunked="+strconv.FormatBool(chunked), func(t *testing.T) {
			origin := func(w http.ResponseWriter, r *http.Request) {
				if !chunked {
					w.Header().Set("Content-Length", "200000")
				}
				w.Write([]byte(strings.Repeat("x", 50000)))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // the origin's server cuts the response off
			}
			eachLeg(t, origin, func(t *testing.T, front *httptest.Server) {
				resp, err := front.Client().Get(front.URL + "/big")
				if err != nil {
					return // cut off before the header reached the client: broken too
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil {
					t.Fatalf("status %d, %d bytes read to a clean end: the cut-off response looked whole", resp.StatusCode, len(body))
				}
			})
		})
	}
}
