package h1serve

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/h3edge/h3edge/certs"
)

var (
	certOnce sync.Once
	cert     tls.Certificate
)

// testCert is a self-signed certificate, made once.
func testCert(t testing.TB) tls.Certificate {
	certOnce.Do(func() {
		var err error
		if cert, err = certs.SelfSigned("localhost"); err != nil {
			panic(err)
		}
	})
	return cert
}

// server is an http.Server on a loopback TLS listener: with h1serve (ours) or as
// net/http serves it (ours false), the reference.
type server struct {
	addr string
	srv  *http.Server
	h1   *Server
}

func start(t testing.TB, h http.Handler, ours bool, tweak func(*http.Server)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{testCert(t)}, NextProtos: []string{"h2", "http/1.1"}}
	srv := &http.Server{Handler: h, TLSConfig: tc, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second}
	if tweak != nil {
		tweak(srv)
	}
	s := &server{addr: ln.Addr().String(), srv: srv}
	var l net.Listener = tls.NewListener(ln, tc)
	if ours {
		s.h1 = New(srv)
		l = s.h1.Split(l)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	t.Cleanup(func() {
		srv.Close()
		if s.h1 != nil {
			s.h1.Close()
		}
		<-done
	})
	return s
}

// dial opens an HTTP/1.1 TLS connection to s.
func (s *server) dial(t testing.TB) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", s.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second)) // a hung test fails instead of waiting forever
	return c
}

// shapes answers by path with the shapes of response the differential test compares.
func shapes(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	q := r.URL.Query()
	h := w.Header()
	h.Set("X-Method", r.Method)
	h.Set("X-Body", strconv.Itoa(len(body)))
	h.Set("X-Host", r.Host)
	h.Set("X-Proto", r.Proto)
	if len(r.Trailer) > 0 {
		var t []string
		for _, k := range sortedKeys(r.Trailer) {
			t = append(t, fmt.Sprintf("%s=%q", k, r.Trailer[k]))
		}
		h.Set("X-Req-Trailer", strings.Join(t, " "))
	}
	if v := q.Get("header"); v != "" {
		h.Set("X-Echo", v)
	}
	switch r.URL.Path {
	case "/small":
		w.Write([]byte("hello, world"))
	case "/html":
		w.Write([]byte("<!DOCTYPE html><html><body>hi</body></html>"))
	case "/empty":
	case "/big":
		w.Write(bytes.Repeat([]byte("0123456789"), 1000))
	case "/flush":
		w.Write([]byte("first"))
		w.(http.Flusher).Flush()
		w.Write([]byte("second"))
	case "/cl":
		h.Set("Content-Length", "5")
		w.Write([]byte("12345"))
	case "/short":
		h.Set("Content-Length", "10")
		w.Write([]byte("12345"))
	case "/trailer":
		h.Set("Trailer", "X-T")
		w.Write([]byte("body"))
		h.Set("X-T", "declared")
		h.Set(http.TrailerPrefix+"X-U", "prefixed")
	case "/status":
		code, _ := strconv.Atoi(q.Get("code"))
		if code < 100 || code > 999 {
			code = 200 // WriteHeader panics on others, net/http's as well
		}
		if ct := q.Get("ct"); ct != "" {
			h.Set("Content-Type", ct)
		}
		if code == 103 {
			h.Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(103)
			code = 200
		}
		w.WriteHeader(code)
		w.Write([]byte("status body"))
	case "/close":
		h.Set("Connection", "close")
		w.Write([]byte("bye"))
	case "/type":
		h["Content-Type"] = nil // no sniffing
		w.Write([]byte("<html>"))
	case "/te":
		h.Set("Transfer-Encoding", "chunked")
		w.Write([]byte("chunked by request"))
	case "/ignore":
		// the body is read above: handlers that ignore it are /unread's
	default:
		http.NotFound(w, r)
	}
}

// unread answers without reading the body.
func unread(w http.ResponseWriter, r *http.Request) { w.Write([]byte("not read")) }

// exchange writes req to c and reads the responses of n requests; each is given as
// its status line, its header (but Date) sorted, its body and trailers, or the read
// error at the end.
func exchange(t *testing.T, c net.Conn, req []byte, heads []string) []string {
	t.Helper()
	// Written beside the reads: a server may answer and close before it has read all
	// (a header too large, a body it will not read), and a client blocked writing would
	// not see that.
	go c.Write(req)
	br := bufio.NewReader(c)
	var out []string
	for _, method := range heads {
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			out = append(out, "error: "+errClass(err))
			break
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s\n", res.Proto, res.Status)
		for res.StatusCode >= 100 && res.StatusCode < 200 && res.StatusCode != 101 {
			for _, k := range sortedKeys(res.Header) {
				fmt.Fprintf(&b, "%s: %q\n", k, res.Header[k])
			}
			if res, err = http.ReadResponse(br, &http.Request{Method: method}); err != nil {
				out = append(out, b.String()+"error: "+errClass(err))
				return out
			}
			fmt.Fprintf(&b, "%s %s\n", res.Proto, res.Status)
		}
		body, err := io.ReadAll(res.Body)
		for _, k := range sortedKeys(res.Header) {
			if k != "Date" {
				fmt.Fprintf(&b, "%s: %q\n", k, res.Header[k])
			}
		}
		shown := string(body)
		if len(body) > 64 {
			shown = fmt.Sprintf("%d bytes, %x", len(body), sha256.Sum256(body))
		}
		fmt.Fprintf(&b, "te=%q cl=%d close=%v body=%q trailer=%v", res.TransferEncoding, res.ContentLength, res.Close, shown, res.Trailer)
		if err != nil {
			fmt.Fprintf(&b, " body error: %s", errClass(err))
		}
		out = append(out, b.String())
		if res.Close {
			break
		}
	}
	return out
}

func errClass(err error) string {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return "connection ended"
	case strings.Contains(err.Error(), "reset"), strings.Contains(err.Error(), "broken pipe"):
		return "connection ended"
	}
	return err.Error()
}

func sortedKeys(h http.Header) []string {
	var ks []string
	for k := range h {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestSameAsNetHTTP sends the same requests, fixed and randomised, to a server of
// h1serve and to net/http's own, and finds the same responses: status lines, fields
// (but Date), bodies, trailers, chunking, keep-alive, and the answers to requests
// that cannot be read.
func TestSameAsNetHTTP(t *testing.T) {
	tweak := func(s *http.Server) { s.MaxHeaderBytes = 4096 }
	mux := http.NewServeMux()
	mux.HandleFunc("/unread", unread)
	mux.HandleFunc("/", shapes)
	ours, ref := start(t, mux, true, tweak), start(t, mux, false, tweak)

	type tc struct {
		name  string
		raw   string
		heads []string // the method of each response to read
	}
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	cases := []tc{
		{"small", get("/small"), []string{"GET"}},
		{"html sniffed", get("/html"), []string{"GET"}},
		{"empty", get("/empty"), []string{"GET"}},
		{"big chunked", get("/big"), []string{"GET"}},
		{"flush", get("/flush"), []string{"GET"}},
		{"declared length", get("/cl"), []string{"GET"}},
		{"short of its length", get("/short") + get("/small"), []string{"GET", "GET"}},
		{"trailers", get("/trailer"), []string{"GET"}},
		{"204", get("/status?code=204"), []string{"GET"}},
		{"304", get("/status?code=304"), []string{"GET"}},
		{"204 with a type", get("/status?code=204&ct=text/x") + get("/small"), []string{"GET", "GET"}},
		{"304 with a type", get("/status?code=304&ct=text/x") + get("/small"), []string{"GET", "GET"}},
		{"written before the body is read, 100-continue awaited", "POST /unread HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", []string{"POST"}},
		{"103 then 200", get("/status?code=103"), []string{"GET"}},
		{"500", get("/status?code=500"), []string{"GET"}},
		{"unknown status", get("/status?code=599"), []string{"GET"}},
		{"handler closes", get("/close") + get("/small"), []string{"GET", "GET"}},
		{"no sniffing", get("/type"), []string{"GET"}},
		{"handler's chunked", get("/te"), []string{"GET"}},
		{"pipelined", get("/small") + get("/big") + get("/flush"), []string{"GET", "GET", "GET"}},
		{"HEAD", "HEAD /small HTTP/1.1\r\nHost: x\r\n\r\n" + get("/small"), []string{"HEAD", "GET"}},
		{"HEAD empty", "HEAD /empty HTTP/1.1\r\nHost: x\r\n\r\n" + get("/small"), []string{"HEAD", "GET"}},
		{"client closes", "GET /small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"GET"}},
		{"HTTP/1.0", "GET /small HTTP/1.0\r\n\r\n", []string{"GET"}},
		{"HTTP/1.0 keep-alive", "GET /small HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + get("/small"), []string{"GET", "GET"}},
		{"HTTP/1.0 chunk-less", "GET /big HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", []string{"GET"}},
		{"POST length", "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + get("/small"), []string{"POST", "GET"}},
		{"POST chunked with trailer", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5\r\nhello\r\n0\r\nX-T: tv\r\n\r\n" + get("/small"), []string{"POST", "GET"}},
		{"unread small body", "POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + get("/small"), []string{"POST", "GET"}},
		{"unread big body", "POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + strings.Repeat("a", 300<<10), []string{"POST"}},
		{"unread chunked body", "POST /unread HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + get("/small"), []string{"POST", "GET"}},
		{"expectation", "POST /small HTTP/1.1\r\nHost: x\r\nExpect: the-unexpected\r\nContent-Length: 1\r\n\r\na", []string{"POST"}},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" + get("/small"), []string{"OPTIONS", "GET"}},
		{"absolute target", "GET http://y/small HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET"}},
		{"no Host", "GET /small HTTP/1.1\r\n\r\n", []string{"GET"}},
		{"bad Host", "GET /small HTTP/1.1\r\nHost: a b\r\n\r\n", []string{"GET"}},
		{"two Hosts", "GET /small HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", []string{"GET"}},
		{"bad field name", "GET /small HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", []string{"GET"}},
		{"bad field value", "GET /small HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", []string{"GET"}},
		{"header too large", "GET /small HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 9000) + "\r\n\r\n", []string{"GET"}},
		{"HTTP/2.0 line", "GET /small HTTP/2.0\r\nHost: x\r\n\r\n", []string{"GET"}},
		{"garbage", "\x00\x01\x02 nonsense\r\n\r\n", []string{"GET"}},
		{"unknown coding", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", []string{"POST"}},
		{"length and chunked", "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"POST"}},
		{"bad length", "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n", []string{"POST"}},
		{"bad chunk", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", []string{"POST"}},
		{"500 fields", "GET /small HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("A: b\r\n", 499) + "\r\n" + get("/small"), []string{"GET", "GET"}},
		{"501 fields", "GET /small HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("A: b\r\n", 500) + "\r\n", []string{"GET"}},
		{"501 fields, absolute target", "GET http://y/small HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("A: b\r\n", 500) + "\r\n", []string{"GET"}},
		{"500 fields and a declared trailer", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n" + strings.Repeat("A: b\r\n", 497) + "\r\n0\r\nX-T: v\r\n\r\n", []string{"POST"}},
		{"501 fields by the Trailer list", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-T, X-U\r\n" + strings.Repeat("A: b\r\n", 497) + "\r\n0\r\nX-T: v\r\n\r\n", []string{"POST"}},
		{"501 trailer fields", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + strings.Repeat("X-T: v\r\n", 501) + "\r\n", []string{"POST"}},
		{"undeclared trailer", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-U: u\r\n\r\n" + get("/small"), []string{"POST", "GET"}},
		{"declared and undeclared trailers", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n1\r\na\r\n0\r\nX-T: t\r\nX-U: u\r\n\r\n", []string{"POST"}},
		{"framing field declared as a trailer", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\n\r\n", []string{"POST"}},
		{"two Expect fields", "POST /small HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na", []string{"POST"}},
		{"Expect list", "POST /small HTTP/1.1\r\nHost: x\r\nExpect: 100-continue, foo\r\nContent-Length: 1\r\n\r\na", []string{"POST"}},
		{"100-continue twice", "POST /small HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na", []string{"POST"}},
		{"100-continue any case", "POST /small HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\na", []string{"POST"}},
		{"empty Expect", "POST /small HTTP/1.1\r\nHost: x\r\nExpect:\r\nContent-Length: 1\r\n\r\na", []string{"POST"}},
		{"two Transfer-Encoding fields", "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"POST"}},
		{"CRLF after a POST body", "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na\r\n" + get("/small"), []string{"POST", "GET"}},
		{"two CRLFs after a POST body", "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na\r\n\r\n" + get("/small"), []string{"POST", "GET"}},
		{"CRLF after a GET", get("/small") + "\r\n" + get("/small"), []string{"GET", "GET"}},
		{"CRLF before the first request", "\r\n" + get("/small"), []string{"GET"}},
	}
	// Randomised requests: methods, fields, bodies by length or chunked, trailers.
	rng := mrand.New(mrand.NewPCG(16, 1))
	paths := []string{"/small", "/big", "/flush", "/trailer", "/cl", "/empty", "/html", "/status?code=201"}
	for i := range 40 {
		var b strings.Builder
		var heads []string
		for range 1 + rng.IntN(3) {
			m := []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"}[rng.IntN(6)]
			heads = append(heads, m)
			fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: h%d.example\r\n", m, paths[rng.IntN(len(paths))], rng.IntN(3))
			for j := range rng.IntN(4) {
				fmt.Fprintf(&b, "X-F%d: %s\r\n", j, strings.Repeat("v", rng.IntN(40)))
			}
			body := strings.Repeat("b", rng.IntN(5000))
			switch rng.IntN(3) {
			case 0:
				if len(body) > 0 {
					fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
				} else {
					b.WriteString("\r\n")
				}
			case 1:
				b.WriteString("Transfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n")
				for len(body) > 0 {
					n := min(len(body), 1+rng.IntN(1500))
					fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
					body = body[n:]
				}
				b.WriteString("0\r\nX-T: t\r\n\r\n")
			default:
				b.WriteString("\r\n")
			}
		}
		cases = append(cases, tc{fmt.Sprintf("random %d", i), b.String(), heads})
	}
	for _, c := range cases {
		got := exchange(t, ours.dial(t), []byte(c.raw), c.heads)
		want := exchange(t, ref.dial(t), []byte(c.raw), c.heads)
		if !slices.Equal(got, want) {
			t.Errorf("%s:\nh1serve:  %q\nnet/http: %q", c.name, got, want)
		}
	}
}

// TestH2ToNetHTTP: connections that negotiate h2 are net/http's; HTTP/1.1 ones are
// h1serve's, with the server and the local address in the request's context.
func TestH2ToNetHTTP(t *testing.T) {
	var s *server
	s = start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(http.ServerContextKey) != s.srv {
			t.Errorf("%s: ServerContextKey is not the server", r.Proto)
		}
		if a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr); a == nil || a.String() != s.addr {
			t.Errorf("%s: LocalAddrContextKey = %v, want %s", r.Proto, a, s.addr)
		}
		if r.TLS == nil || r.TLS.HandshakeComplete != true {
			t.Errorf("%s: no TLS state", r.Proto)
		}
		io.WriteString(w, r.Proto)
	}), true, nil)
	for _, h2 := range []bool{true, false} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		res, err := (&http.Client{Transport: tr}).Get("https://" + s.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		tr.CloseIdleConnections()
		want := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]
		if string(b) != want {
			t.Errorf("h2 %v: served as %q, want %q", h2, b, want)
		}
	}
}

// TestContinue: the body's first Read sends 100 Continue; a handler that answers
// without reading gets no 100 and the connection closes after its response.
func TestContinue(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/unread" {
			io.WriteString(w, "no")
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}), true, nil)
	c := s.dial(t)
	br := bufio.NewReader(c)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q, %v; want 100 Continue", line, err)
	}
	br.ReadString('\n')
	io.WriteString(c, "hello")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(res.Body); string(b) != "hello" || res.Close {
		t.Fatalf("echo %q close %v", b, res.Close)
	}

	// The handler writes without reading: the client, waiting for 100 Continue, never
	// sends the body, so the response must come at once, not after the server waited
	// for the body (the header timeout, 5 s).
	c = s.dial(t)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	br = bufio.NewReader(c)
	io.WriteString(c, "POST /unread HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 || string(b) != "no" || !res.Close {
		t.Fatalf("status %d body %q close %v; want 200 \"no\" and Connection: close", res.StatusCode, b, res.Close)
	}
}

// TestClientGone: a handler still running when its client closes the connection sees
// its context cancelled (the background read that begins after bgReadDelay).
func TestClientGone(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan error, 1)
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			cancelled <- nil
		case <-time.After(10 * time.Second):
			cancelled <- errors.New("context not cancelled 10 s after the client left")
		}
	}), true, nil)
	c := s.dial(t)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	c.Close()
	if err := <-cancelled; err != nil {
		t.Fatal(err)
	}
}

// TestHijack: a hijacked connection is the handler's, deadlines lifted, with the
// bytes the client sent after its request.
func TestHijack(t *testing.T) {
	var states sync.Map
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString(strings.ToUpper(line))
		brw.Flush()
	}), true, func(s *http.Server) {
		s.ReadHeaderTimeout = 100 * time.Millisecond
		s.ConnState = func(c net.Conn, st http.ConnState) { states.Store(st, true) }
	})
	c := s.dial(t)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nfirst line\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 101 {
		t.Fatalf("%v %v", res, err)
	}
	// The header timeout has passed by the time the second line is sent: a hijacked
	// connection has no deadline.
	time.Sleep(200 * time.Millisecond) // lets the 100 ms header deadline pass; not a synchronisation
	line, err := br.ReadString('\n')
	if err != nil || line != "FIRST LINE\n" {
		t.Fatalf("echo %q %v", line, err)
	}
	if _, ok := states.Load(http.StateHijacked); !ok {
		t.Error("ConnState did not hear StateHijacked")
	}
}

// TestAbort: a handler that panics with http.ErrAbortHandler mid-body ends the
// connection without the last chunk, so the client sees a truncated body, and the
// server goes on.
func TestAbort(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			w.Write(bytes.Repeat([]byte("x"), 5000))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "fine")
	}), true, func(s *http.Server) { s.ErrorLog = nil })
	got := exchange(t, s.dial(t), []byte("GET /abort HTTP/1.1\r\nHost: x\r\n\r\n"), []string{"GET"})
	if len(got) != 1 || !strings.Contains(got[0], "body error: connection ended") {
		t.Fatalf("aborted response read as %q", got)
	}
	got = exchange(t, s.dial(t), []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), []string{"GET"})
	if len(got) != 1 || !strings.Contains(got[0], `body="fine"`) {
		t.Fatalf("after the abort: %q", got)
	}
}

// TestTimeouts: a header that does not come in time, and an idle connection past the
// idle timeout, are closed.
func TestTimeouts(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), true,
		func(s *http.Server) { s.ReadHeaderTimeout, s.IdleTimeout = 150*time.Millisecond, 300*time.Millisecond })
	for _, tc := range []struct {
		name, send string
		min        time.Duration
	}{
		{"partial header", "GET / HTTP/1.1\r\nHost: x\r\n", 150 * time.Millisecond},
		{"idle", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 300 * time.Millisecond},
	} {
		c := s.dial(t)
		t0 := time.Now()
		io.WriteString(c, tc.send)
		_, err := io.Copy(io.Discard, c) // until the server closes
		if el := time.Since(t0); err != nil || el < tc.min {
			t.Errorf("%s: closed after %v (%v), want ≥ %v", tc.name, el, err, tc.min)
		}
	}
}

// TestShutdown: Shutdown closes idle connections at once, lets a request in flight
// finish with Connection: close, and returns once the connections are gone.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "ok")
	}), true, nil)
	idle := s.dial(t)
	if got := exchange(t, idle, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), []string{"GET"}); !strings.Contains(got[0], "200 OK") {
		t.Fatal(got)
	}
	busy := s.dial(t)
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	done := make(chan error)
	go func() { done <- s.h1.Shutdown(context.Background()) }()
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Error("idle connection still open after Shutdown")
	}
	close(release)
	res, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil || res.StatusCode != 200 || !res.Close {
		t.Fatalf("request in flight: %v %v; want 200 with Connection: close", res, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// fuzzConn is a connection whose client sends in and reads nothing back.
type fuzzConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *fuzzConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *fuzzConn) Write(p []byte) (int, error) { return c.out.Write(p) }
func (c *fuzzConn) Close() error                { return nil }
func (c *fuzzConn) LocalAddr() net.Addr         { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443} }
func (c *fuzzConn) RemoteAddr() net.Addr        { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 5000} }
func (c *fuzzConn) SetDeadline(time.Time) error { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error {
	return nil
}
func (c *fuzzConn) SetWriteDeadline(time.Time) error       { return nil }
func (c *fuzzConn) HandshakeContext(context.Context) error { return nil }
func (c *fuzzConn) ConnectionState() tls.ConnectionState   { return tls.ConnectionState{} }
func (c *fuzzConn) CloseWrite() error                      { return nil }

// FuzzServe serves whatever bytes a client sends on one connection: the server must
// neither panic (its recover would hide it: the error log is checked) nor hang, and
// what it writes must be HTTP/1.x responses.
func FuzzServe(f *testing.F) {
	for _, seed := range []string{
		"GET /small HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /flush HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /trailer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"POST /small HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
		"HEAD /cl HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"PUT /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody",
		"GET /status?code=103 HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	var log bytes.Buffer
	var logMu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("/unread", unread)
	mux.HandleFunc("/", shapes)
	srv := &http.Server{Handler: mux, ErrorLog: nil, ReadHeaderTimeout: time.Second, MaxHeaderBytes: 1024}
	srv.ErrorLog = newLogger(&log, &logMu)
	s := New(srv)
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &fuzzConn{in: bytes.NewReader(in)}
		s.serve(c, &tls.ConnectionState{})
		logMu.Lock()
		l := log.String()
		log.Reset()
		logMu.Unlock()
		if strings.Contains(l, "panic") {
			t.Fatalf("panic serving %q:\n%s", in, l)
		}
		if out := c.out.Bytes(); len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.")) {
			t.Fatalf("wrote %q for %q", out, in)
		}
	})
}

func newLogger(w io.Writer, mu *sync.Mutex) *log.Logger {
	return log.New(lockedWriter{w, mu}, "", 0)
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// streamConn is a client connection that sends one request n times and throws the
// responses away: the server's own work, without the kernel's.
type streamConn struct {
	fuzzConn
	req  []byte
	n    int
	off  int
	done chan struct{}
}

func (c *streamConn) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, io.EOF
	}
	k := copy(p, c.req[c.off:])
	if c.off += k; c.off == len(c.req) {
		c.off = 0
		c.n--
	}
	return k, nil
}

func (c *streamConn) Write(p []byte) (int, error) { return len(p), nil }

func (c *streamConn) Close() error {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	return nil
}

// oneConn is a listener that yields c, then blocks until c is closed.
type oneConn struct {
	c    *streamConn
	sent bool
}

func (l *oneConn) Accept() (net.Conn, error) {
	if !l.sent {
		l.sent = true
		return l.c, nil
	}
	<-l.c.done
	return nil, net.ErrClosed
}
func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

// BenchmarkServe: one keep-alive GET after another on one connection, answered
// "ok" with its length and type set, by h1serve and by net/http's HTTP/1.1 server
// (the connection is not TLS here, so net/http serves it itself). Run:
//
//	go test -run - -bench Serve -benchmem ./edge/h1serve/
func BenchmarkServe(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/plain")
		h.Set("Content-Length", "2")
		w.Write([]byte("ok"))
	})
	req := []byte("GET /api/x?id=1 HTTP/1.1\r\nHost: app.example\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	for _, name := range []string{"h1serve", "nethttp"} {
		b.Run(name, func(b *testing.B) {
			c := &streamConn{req: req, n: b.N, done: make(chan struct{})}
			srv := &http.Server{Handler: ok, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
			b.ReportAllocs()
			b.ResetTimer()
			if name == "h1serve" {
				New(srv).serve(c, &tls.ConnectionState{})
			} else {
				go srv.Serve(&oneConn{c: c})
				<-c.done
			}
			b.StopTimer()
			srv.Close()
		})
	}
}

// TestPipelinedByteKept: the background read of a slow handler takes the first byte of
// the request the client sent behind it, before the response; that request is still
// served whole.
func TestPipelinedByteKept(t *testing.T) {
	began, read := make(chan struct{}, 1), make(chan int, 1)
	testHookBackgroundRead = func(n int) {
		if n == 0 {
			began <- struct{}{}
		}
		select {
		case read <- n:
		default:
		}
	}
	t.Cleanup(func() { testHookBackgroundRead = nil })
	release := make(chan struct{})
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		io.WriteString(w, r.URL.Path)
	}), true, nil)
	c := s.dial(t)
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-began
	<-read // the hook's call at the start
	io.WriteString(c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	if n := <-read; n != 1 {
		t.Fatalf("the background read got %d bytes, want the next request's first", n)
	}
	close(release)
	got := exchange(t, c, nil, []string{"GET", "GET"})
	if len(got) != 2 || !strings.Contains(got[0], `body="/slow"`) || !strings.Contains(got[1], `body="/next"`) {
		t.Fatalf("responses %q, want /slow then /next", got)
	}
}

// TestDiscardDeadlineLifted: a body the handler did not read, dropped when its
// response's header goes out, leaves no read deadline behind for the background read
// to meet: a handler that runs past the header timeout keeps its context.
func TestDiscardDeadlineLifted(t *testing.T) {
	got := make(chan error, 1)
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 3000))) // past the buffer: the header goes, the body is dropped
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			got <- r.Context().Err()
		case <-time.After(1500 * time.Millisecond): // 5 header timeouts
			got <- nil
		}
	}), true, func(s *http.Server) { s.ReadHeaderTimeout = 300 * time.Millisecond })
	c := s.dial(t)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789")
	go io.Copy(io.Discard, c)
	if err := <-got; err != nil {
		t.Fatalf("a connected client's request was cancelled: %v", err)
	}
}

// TestBodyReadAfterReturn: a goroutine of the handler's that goes on reading the body
// after the handler returned (a proxy's request writer) gets an error, not bytes
// from the connection's reader, which is pooled once the connection closes (the race
// detector sees it otherwise).
func TestBodyReadAfterReturn(t *testing.T) {
	first, done := make(chan struct{}), make(chan error, 1)
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		go func() {
			b := make([]byte, 10)
			if _, err := io.ReadFull(r.Body, b); err != nil {
				done <- err
				return
			}
			close(first)
			for {
				if _, err := r.Body.Read(b); err != nil {
					done <- nil
					return
				}
			}
		}()
		<-first
	}), true, nil)
	c := s.dial(t)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 100000\r\n\r\n0123456789")
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte(strings.Repeat("y", 2000))) // may fail: the server closes
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// An HTTP/1.0 client takes any status line for the final response, so a handler's 1xx
// is not sent to it (RFC 9110 §15.2; net/http's server sends it): the 200 comes first,
// and the next request on the connection gets its own answer.
func TestNo1xxToHTTP10(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", shapes)
	s := start(t, mux, true, nil)
	c := s.dial(t)
	defer c.Close()
	raw := "GET /status?code=103 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /small HTTP/1.0\r\n\r\n"
	got := exchange(t, c, []byte(raw), []string{"GET", "GET"})
	if len(got) != 2 || !strings.HasPrefix(got[0], "HTTP/1.0 200") || !strings.HasPrefix(got[1], "HTTP/1.0 200") {
		t.Fatalf("HTTP/1.0 requests, the first with a handler's 103: got %q, want two 200s and no 103", got)
	}
}

// TestWhereItDiffers holds h1serve to the answers the package comment gives where it
// differs from net/http's server, which hands these requests to the handler.
func TestWhereItDiffers(t *testing.T) {
	called := make(chan string, 4)
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called <- r.Method + " " + r.RequestURI
	}), true, nil)
	for _, c := range []struct{ name, raw, status string }{
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported"},
		{"empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "HTTP/1.1 400 Bad Request"},
	} {
		got := exchange(t, s.dial(t), []byte(c.raw), []string{"GET"})
		if len(got) != 1 || !strings.HasPrefix(got[0], c.status) || !strings.Contains(got[0], "close=true") {
			t.Errorf("%s: got %q, want %s and the connection closed", c.name, got, c.status)
		}
	}
	select {
	case r := <-called:
		t.Errorf("the handler was given %q", r)
	default:
	}
}

// Trailer fields RFC 9110 §6.5.1 forbids, which net/http's server hands on, do not
// reach the handler (and so not a proxied origin); the others, declared or not, do.
func TestForbiddenTrailersDropped(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", shapes)
	s := start(t, mux, true, nil)
	raw := "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n1\r\na\r\n0\r\n" +
		"X-T: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nHost: evil\r\nAuthorization: Basic eA==\r\nContent-Type: text/x\r\nX-U: u\r\n\r\n" +
		"GET /small HTTP/1.1\r\nHost: x\r\n\r\n"
	got := exchange(t, s.dial(t), []byte(raw), []string{"POST", "GET"})
	want := `X-Req-Trailer: ["X-T=[\"t\"] X-U=[\"u\"]"]`
	if len(got) != 2 || !strings.Contains(got[0], want+"\n") || !strings.HasPrefix(got[1], "HTTP/1.1 200 OK") {
		t.Errorf("got %q, want the first with %s and a second 200", got, want)
	}
}
