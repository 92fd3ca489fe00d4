package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/h3edge/h3edge/edge/config"
)

// The requests of this file come from clients that speak HTTP/2 or HTTP/3 (or break
// HTTP/1.1's rules) to an edge whose origin speaks HTTP/1.1: what the origin reads must
// be the request the edge routed, and what the client gets a response its protocol
// allows. The origins are raw TCP listeners that record each request's head.

// headOrigin records the head of every request it reads and answers with reply.
type headOrigin struct {
	ln    net.Listener
	mu    sync.Mutex
	heads []string
}

func startHeadOrigin(t *testing.T, reply func(head string) string) *headOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o := &headOrigin{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var h strings.Builder
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if h.WriteString(line); line == "\r\n" {
							break
						}
					}
					o.mu.Lock()
					o.heads = append(o.heads, h.String())
					o.mu.Unlock()
					if _, err := io.WriteString(c, reply(h.String())); err != nil {
						return
					}
				}
			}()
		}
	}()
	return o
}

func (o *headOrigin) url() string { return "http://" + o.ln.Addr().String() }

// lines returns the request lines read so far.
func (o *headOrigin) lines() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ls []string
	for _, h := range o.heads {
		l, _, _ := strings.Cut(h, "\r\n")
		ls = append(ls, l)
	}
	return ls
}

func okReply(string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
}

// h2Status sends one HEADERS frame of the given pseudo-header fields and returns the
// response's :status.
func h2Status(t *testing.T, addr, method, path string) string {
	t.Helper()
	conn, fr := h2Dial(t, addr)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", method}, {":scheme", "https"}, {":authority", "127.0.0.1"}, {":path", path}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true})
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			return h.PseudoValue("status")
		}
	}
}

// An HTTP/2 :method with spaces (Go's HTTP/2 server takes any field value) gets 400 and
// never reaches the origin, where it would be another request line.
func TestMethodNotATokenRefused(t *testing.T) {
	o := startHeadOrigin(t, okReply)
	e := startEdge(t, func(c *config.Config) { c.Upstream = o.url() })
	if st := h2Status(t, e.Addr().String(), "GET /admin?x= HTTP/1.1\tX", "/public"); st != "400" {
		t.Errorf(":status %s, want 400; the origin read %q", st, o.lines())
	}
	if ls := o.lines(); len(ls) != 0 {
		t.Errorf("the origin read %q", ls)
	}
}

// A space or '#' in an HTTP/2 or HTTP/3 query is escaped: the origin's request line
// has its three parts, and the target the edge routed.
func TestQueryCannotEndTheTarget(t *testing.T) {
	o := startHeadOrigin(t, okReply)
	e := startEdge(t, func(c *config.Config) { c.Upstream = o.url() })
	for _, proto := range []string{"h3", "h2"} {
		for _, q := range []string{"a=1 /admin HTTP/1.0", "q=1#frag"} {
			req, _ := http.NewRequest("GET", e.url+"/public", nil)
			req.URL.RawQuery = q
			resp, err := clientFor(t, proto).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			ls := o.lines()
			want := "GET /public?" + strings.NewReplacer(" ", "%20", "#", "%23").Replace(q) + " HTTP/1.1"
			if l := ls[len(ls)-1]; l != want {
				t.Errorf("%s %q: the origin read %q, want %q", proto, q, l, want)
			}
		}
	}
}

// An origin's 1xx reaches the client without its hop-by-hop fields (HTTP/2 and HTTP/3
// forbid them: quic-go's client fails the request), and the final response keeps the
// fields the edge set for it (Alt-Svc, on HTTP/2 and HTTP/1.1).
func Test1xxWithoutHopByHop(t *testing.T) {
	o := startHeadOrigin(t, func(string) string {
		return "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n\r\n" + okReply("")
	})
	e := startEdge(t, func(c *config.Config) { c.Upstream = o.url() })
	for _, proto := range []string{"h3", "h2", "h1"} {
		var hints textproto.MIMEHeader
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error { hints = h; return nil }})
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/", nil)
		resp, err := clientFor(t, proto).Do(req)
		if err != nil {
			t.Errorf("%s: %v", proto, err)
			continue
		}
		resp.Body.Close()
		if hints.Get("Link") == "" || hints["Connection"] != nil || hints["Keep-Alive"] != nil || hints["X-Hop"] != nil {
			t.Errorf("%s: the 103 carried %v, want Link alone", proto, hints)
		}
		if resp.StatusCode != 200 || proto != "h3" && resp.Header.Get("Alt-Svc") == "" { // none on HTTP/3
			t.Errorf("%s: %d, Alt-Svc %q: the final response lost the edge's fields", proto, resp.StatusCode, resp.Header.Get("Alt-Svc"))
		}
	}
}

// A response the origin sent without a Content-Type reaches the client without one:
// the servers would otherwise sniff it, and call an upload text/html.
func TestNoSniffedContentType(t *testing.T) {
	o := startHeadOrigin(t, func(string) string {
		return "HTTP/1.1 200 OK\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 31\r\n\r\n<html><script>alert(1)</script>"
	})
	e := startEdge(t, func(c *config.Config) { c.Upstream = o.url() })
	for _, proto := range []string{"h3", "h2", "h1"} {
		resp, body := do(t, clientFor(t, proto), "GET", e.url+"/upload/1", nil, nil)
		if ct, ok := resp.Header["Content-Type"]; ok || len(body) != 31 {
			t.Errorf("%s: Content-Type %q and %d bytes, want none and the 31 bytes", proto, ct, len(body))
		}
	}
}

// A status below 100 (http.ReadResponse takes 000-099) gets 502 and leaves the pool
// whole: its one connection slot serves the next request.
func TestStatusBelow100(t *testing.T) {
	o := startHeadOrigin(t, func(head string) string {
		if strings.HasPrefix(head, "GET /bad ") {
			return "HTTP/1.1 099 Odd\r\n\r\n" + okReply("")
		}
		return okReply(head)
	})
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"app": {Targets: []string{o.url()}, MaxConnections: 1, Timeout: 10 * time.Second}}
		c.Routes = []config.Route{{Name: "all", Upstream: "app"}}
	})
	c := clientFor(t, "h2")
	if resp, _ := do(t, c, "GET", e.url+"/bad", nil, nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("/bad: %d, want 502", resp.StatusCode)
	}
	for range 3 {
		if resp, _ := do(t, c, "GET", e.url+"/good", nil, nil); resp.StatusCode != 200 {
			t.Errorf("/good after /bad: %d", resp.StatusCode)
		}
	}
}

// Upgrade: h2c is not passed on: after a 101 the client would speak HTTP/2 straight to
// the origin, past the edge's routes, policies and forwarded fields.
func TestNoH2CUpgrade(t *testing.T) {
	o := startHeadOrigin(t, func(head string) string {
		if strings.Contains(strings.ToLower(head), "upgrade: h2c") {
			return "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
		}
		return okReply(head)
	})
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"app": {Targets: []string{o.url()}}}
		c.Routes = []config.Route{{Name: "public", Upstream: "app", Match: config.RouteMatch{PathPrefix: "/public/"}}}
	})
	for _, upgrade := range []string{"h2c", "websocket, h2c"} {
		conn, err := tls.Dial("tcp", e.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, "GET /public/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: "+upgrade+"\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Errorf("Upgrade: %s: %d, want the origin's 200 to a plain request", upgrade, resp.StatusCode)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, h := range o.heads {
		if l := strings.ToLower(h); strings.Contains(l, "upgrade") || strings.Contains(l, "http2-settings") {
			t.Errorf("the origin read an upgrade: %q", h)
		}
	}
}

// An origin's undeclared trailers reach an HTTP/1.1 client without hop-by-hop fields
// (HTTP/2's and HTTP/3's servers drop those themselves).
func TestUndeclaredTrailersWithoutHopByHop(t *testing.T) {
	o := startHeadOrigin(t, func(string) string {
		return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: v\r\nConnection: close\r\nKeep-Alive: timeout=5\r\n\r\n"
	})
	e := startEdge(t, func(c *config.Config) { c.Upstream = o.url() })
	for _, proto := range []string{"h1", "h2", "h3"} {
		req, _ := http.NewRequest("GET", e.url+"/", nil)
		req.Header.Set("Te", "trailers")
		resp, err := clientFor(t, proto).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Trailer.Get("X-T") != "v" || resp.Trailer["Connection"] != nil || resp.Trailer["Keep-Alive"] != nil {
			t.Errorf("%s: trailers %v, want X-T alone", proto, resp.Trailer)
		}
	}
}

// Address fields a client chose (X-Real-IP and the like, X-Forwarded-* beyond the
// three the edge sets, CGI-style underscore spellings) do not reach the origin from an
// untrusted peer; from a trusted proxy they do.
func TestClientAddrFieldsOnlyFromTrustedProxies(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(r.Header)
	}))
	t.Cleanup(up.Close)
	spoof := map[string]string{
		"X-Real-Ip": "203.0.113.66", "True-Client-Ip": "203.0.113.66", "X-Client-Ip": "203.0.113.66",
		"X-Forwarded-Port": "1", "X-Forwarded-Ssl": "off", "X_Forwarded_For": "203.0.113.66", "X_Real_Ip": "203.0.113.66",
	}
	for _, trusted := range []bool{false, true} {
		e := startEdge(t, func(c *config.Config) {
			c.Upstream = up.URL
			if trusted {
				c.TrustedProxies = []string{"127.0.0.0/8"}
			}
		})
		for _, p := range protos {
			req, _ := http.NewRequest("GET", e.url+"/x", nil)
			for k, v := range spoof {
				req.Header[k] = []string{v}
			}
			resp, err := clientFor(t, p.name).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var got http.Header
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range spoof {
				seen := false // names with '_' are not canonicalised alike by every server
				for gk, gv := range got {
					seen = seen || strings.EqualFold(gk, k) && len(gv) > 0 && gv[0] == v
				}
				if seen != trusted {
					t.Errorf("%s, trusted peer %v: the origin got %s: %v", p.name, trusted, k, seen)
				}
			}
			if got.Get("X-Forwarded-Proto") != "https" {
				t.Errorf("%s: X-Forwarded-Proto %q", p.name, got.Get("X-Forwarded-Proto"))
			}
		}
	}
}
