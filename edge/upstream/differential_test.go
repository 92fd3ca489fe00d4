package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// recorded is what the recording origin saw of one request.
type recorded struct {
	Method, RequestURI, Proto, Host string
	Header, Trailer                 http.Header
	ContentLength                   int64
	TransferEncoding                []string
	Close                           bool
	Body                            []byte
}

// seen is what the client saw of one response: its 1xx responses, then the response.
type seen struct {
	Informational    []informational
	Status           int
	Header, Trailer  http.Header
	ContentLength    int64
	TransferEncoding []string
	Body             []byte
}

type informational struct {
	Code   int
	Header textproto.MIMEHeader
}

// recordingOrigin records every request by its X-Seq and answers as X-Seq's number
// decides: a random status, an Early Hints first or not, header fields (hop-by-hop
// ones too, some named by Connection), a body of fixed or unknown length (flushed in
// pieces; now and then a large one, or an event stream), with trailers declared,
// undeclared (http.TrailerPrefix) or none.
type recordingOrigin struct {
	*httptest.Server
	mu   sync.Mutex
	reqs map[string]recorded
}

// startRecordingOrigin starts one on HTTP/1.1, and on HTTP/2 without TLS (an h2c://
// target) as well when h2c is set.
func startRecordingOrigin(t *testing.T, h2c bool) *recordingOrigin {
	o := &recordingOrigin{reqs: map[string]recorded{}}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("origin reading the body: %v", err)
		}
		seq := r.Header.Get("X-Seq")
		o.mu.Lock()
		o.reqs[seq] = recorded{r.Method, r.RequestURI, r.Proto, r.Host, r.Header.Clone(), r.Trailer.Clone(),
			r.ContentLength, r.TransferEncoding, r.Close, body}
		o.mu.Unlock()
		n, _ := strconv.Atoi(seq)
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		statuses := []int{200, 200, 200, 201, 204, 301, 304, 404, 500}
		status := statuses[rng.IntN(len(statuses))]
		if rng.IntN(5) == 0 {
			w.Header().Set("Link", "</style.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		for i := range rng.IntN(4) {
			w.Header().Add(fmt.Sprintf("X-Resp-%d", i%2), randToken(rng))
		}
		if rng.IntN(4) == 0 {
			w.Header().Set("Connection", "X-Resp-Hop")
			w.Header().Set("X-Resp-Hop", randToken(rng))
			w.Header().Set("Keep-Alive", "timeout=5")
			w.Header().Set("Proxy-Authenticate", "Basic")
		}
		size := rng.IntN(3000)
		if rng.IntN(12) == 0 {
			size = 10000 + rng.IntN(40000) // × up to 25 bytes: up to 1 MB
		}
		data := bytes.Repeat([]byte(randToken(rng)), size)
		chunked := rng.IntN(2) == 0
		trailers := chunked && rng.IntN(2) == 0
		late := chunked && rng.IntN(3) == 0 // an undeclared trailer
		if chunked && rng.IntN(4) == 0 && status != http.StatusNoContent && status != http.StatusNotModified {
			// (not on a 204 or 304: ReverseProxy flushes an event stream's header from
			// a timer, so whether a 204 gets a Content-Length: 0 is a race)
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		}
		if trailers {
			w.Header().Set("Trailer", "X-Checksum")
		}
		if !chunked && status != http.StatusNoContent && status != http.StatusNotModified {
			// (net/http's HTTP/2 client takes a 304's Content-Length for its body's)
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		}
		w.WriteHeader(status)
		for len(data) > 0 {
			k := min(len(data), 1+rng.IntN(5000))
			w.Write(data[:k])
			data = data[k:]
			if chunked {
				w.(http.Flusher).Flush()
			}
		}
		if trailers {
			w.Header().Set("X-Checksum", strconv.Itoa(len(body)))
		}
		if late {
			w.Header().Set(http.TrailerPrefix+"X-Late", "late-"+seq)
		}
	}))
	if h2c {
		var protos http.Protocols
		protos.SetHTTP1(true)
		protos.SetUnencryptedHTTP2(true)
		o.Config.Protocols = &protos
	}
	o.Start()
	t.Cleanup(o.Close)
	return o
}

func randToken(rng *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~!#$&'*+^`|"
	b := make([]byte, 1+rng.IntN(24))
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// randRequest builds request seq: a method, header fields (repeated ones too; the
// client's forwarded fields; with hop set, hop-by-hop ones, some named by Connection,
// which only an HTTP/1.1 client sends), a query that does or does not parse, and a
// body that is absent, empty, short or long with a Content-Length, or of unknown
// length (chunked on HTTP/1.1) with or without trailers.
func randRequest(t *testing.T, base string, seq int, hop bool) *http.Request {
	rng := rand.New(rand.NewPCG(uint64(seq), 3))
	methods := []string{"GET", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	method := methods[rng.IntN(len(methods))]
	var body io.Reader
	var length int64 = -1
	kind := rng.IntN(6)
	var trailer http.Header
	switch kind {
	case 0: // none
	case 1:
		body, length = strings.NewReader(""), 0
	case 2, 3: // fixed length, short or past maxInlineBody
		n := rng.IntN(4000)
		if kind == 3 {
			n = maxInlineBody + rng.IntN(maxInlineBody)
		}
		body, length = bytes.NewReader(bytes.Repeat([]byte{byte('a' + seq%26)}, n)), int64(n)
	default: // unknown length
		data := bytes.Repeat([]byte(randToken(rng)), rng.IntN(500))
		body = io.MultiReader(bytes.NewReader(data)) // hides the length
		if kind == 5 {
			trailer = http.Header{"X-Body-Sum": nil}
		}
	}
	path := fmt.Sprintf("/p/%d/%s?q=%s&n=%d", seq, randToken(rng), randToken(rng), rng.IntN(100))
	badQuery := rng.IntN(8) == 0
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if badQuery {
		req.URL.RawQuery += ";x=1&bad=%zz" // re-encoded on the way
	}
	if length >= 0 {
		req.ContentLength = length
	}
	req.Host = "app.example"
	req.Header.Set("X-Seq", strconv.Itoa(seq))
	for i := range rng.IntN(6) {
		req.Header.Add(fmt.Sprintf("X-Req-%d", i%3), randToken(rng)+" "+randToken(rng))
	}
	switch rng.IntN(3) {
	case 0:
		req.Header.Set("User-Agent", "")
	case 1:
		req.Header.Set("User-Agent", "diff/"+randToken(rng))
	}
	if rng.IntN(3) == 0 {
		req.Header.Set("Accept-Encoding", "gzip, br")
	}
	if rng.IntN(4) == 0 {
		req.Header.Set("Cookie", "a="+randToken(rng))
		req.Header.Add("Cookie", "b="+randToken(rng))
	}
	if rng.IntN(4) == 0 {
		req.Header.Set("X-Forwarded-For", "192.0.2.7")
		req.Header.Set("Forwarded", "for=192.0.2.7")
		req.Header.Set("Via", "1.1 elsewhere")
	}
	if hop && rng.IntN(3) == 0 {
		req.Header.Set("Connection", "X-Hop-A, keep-alive")
		req.Header.Set("X-Hop-A", randToken(rng))
		req.Header.Set("Keep-Alive", "timeout=5")
		req.Header.Set("Proxy-Connection", "keep-alive")
		req.Header.Set("Proxy-Authorization", "Basic eDp5")
		if rng.IntN(2) == 0 {
			req.Header.Set("Te", "trailers")
		}
		if rng.IntN(3) == 0 {
			req.Header.Set("Connection", "Upgrade, X-Hop-A")
			req.Header.Set("Upgrade", "example/1")
		}
	}
	if trailer != nil {
		req.Trailer = trailer
		req.Body = trailingBody{req.Body, req}
	}
	return req
}

// trailingBody fills the request's trailer once its body is read.
type trailingBody struct {
	io.ReadCloser
	req *http.Request
}

func (b trailingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.req.Trailer.Set("X-Body-Sum", "sum-"+b.req.Header.Get("X-Seq"))
	}
	return n, err
}

// referenceProxy is the proxy leg before Pool's own loop: httputil.ReverseProxy, set
// up as New set it up, over p's retries and transports. TestDifferential holds the
// loop to it.
func referenceProxy(p *Pool) http.Handler {
	return &httputil.ReverseProxy{
		Transport:    poolTransport{p},
		Rewrite:      func(pr *httputil.ProxyRequest) { p.rewrite(pr.Out, pr.In) },
		BufferPool:   copyBuffers{},
		ErrorHandler: p.errorHandler,
	}
}

// poolTransport is a Pool as ReverseProxy's Transport.
type poolTransport struct{ p *Pool }

func (t poolTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.p.roundTrip(req, nil, nil)
}

// copyBuffers lends ReverseProxy the pool's body copy buffers.
type copyBuffers struct{}

func (copyBuffers) Get() []byte  { return copyBufferPool.Get().(*[32 << 10]byte)[:] }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put((*[32 << 10]byte)(b)) }

// testRewrite sets forwarded fields as the edge's Rewrite does (edge/proxy.go).
func testRewrite(out, in *http.Request) {
	vs := []string{"127.0.0.1", in.Host}
	out.Header["X-Forwarded-For"] = vs[0:1:1]
	out.Header["X-Forwarded-Host"] = vs[1:2:2]
	out.Header["Via"] = append(out.Header["Via"], "1.1 h3edge")
}

// proxyLeg is one way to proxy: ReverseProxy or the pool's loop, over a transport.
type proxyLeg struct {
	name      string
	reference bool // httputil.ReverseProxy
	nt        func(Target, *Config) Transport
}

// TestDifferential sends the same randomised requests through several proxy legs —
// httputil.ReverseProxy (the reference, as the pool used it before its own loop) and
// the pool's loop, over net/http's Transport and over DefaultTransport (h1Client) to
// an http:// target, and over HTTP/2 to an h2c:// one — each to its own recording
// origin, from HTTP/1.1 and HTTP/2 clients: what each origin saw, and what each client
// got (1xx responses, header, body, trailers), must be identical. Requests h1Client
// carries itself (no body, bodies up to maxInlineBody with a length, empty probed
// bodies) and those it hands to its fallback are both among them.
//
// One difference is known and checked instead: a request's trailer reaches the origin
// through the loop, which shares the incoming request's trailer map (the server fills
// it once the body is read); ReverseProxy's Clone copies the map before that, so the
// origin got the trailer's names without values.
func TestDifferential(t *testing.T) {
	for _, target := range []string{"http", "h2c"} {
		legs := []proxyLeg{
			{"reverseproxy+nethttp", true, NetHTTPTransport},
			{"reverseproxy+default", true, DefaultTransport},
			{"loop+default", false, DefaultTransport},
			{"loop+nethttp", false, NetHTTPTransport},
		}
		if target == "h2c" {
			legs = legs[1:3] // one transport: HTTP/2
		}
		for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
			t.Run(target+"/"+proto, func(t *testing.T) {
				differential(t, target, proto, legs)
			})
		}
	}
}

func differential(t *testing.T, target, proto string, legs []proxyLeg) {
	type run struct {
		origin *recordingOrigin
		front  *httptest.Server
		got    map[int]seen
	}
	runs := make([]*run, len(legs))
	for i, leg := range legs {
		o := startRecordingOrigin(t, target == "h2c")
		u := o.URL
		if target == "h2c" {
			u = "h2c" + strings.TrimPrefix(u, "http")
		}
		p := newPool(t, Config{Targets: []Target{tgt(t, u, 1)}, NewTransport: leg.nt, Rewrite: testRewrite})
		t.Cleanup(p.Close) // after the front's Close (cleanups run last first)
		var h http.Handler = p
		if leg.reference {
			h = referenceProxy(p)
		}
		runs[i] = &run{origin: o, front: frontOf(t, h, proto), got: map[int]seen{}}
	}
	const n = 300
	for seq := range n {
		for i, l := range runs {
			req := randRequest(t, l.front.URL, seq, proto == "HTTP/1.1")
			var infos []informational
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					h = textproto.MIMEHeader(http.Header(h).Clone())
					delete(h, "Date")
					infos = append(infos, informational{code, h})
					return nil
				},
			}))
			resp, err := l.front.Client().Do(req)
			if err != nil {
				t.Fatalf("request %d (%s, %q, length %d): %v", seq, legs[i].name, req.Header, req.ContentLength, err)
			}
			if resp.ProtoMajor != 1 && proto == "HTTP/1.1" || resp.ProtoMajor != 2 && proto == "HTTP/2" {
				t.Fatalf("request %d went over %s", seq, resp.Proto)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("request %d: reading the body: %v", seq, err)
			}
			resp.Header.Del("Date")
			if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
				// No body either way; whether HTTP/2 says so by a length of 0 or by the
				// stream's end is a race in ReverseProxy, which flushes a response of
				// unknown length from a timer.
				resp.ContentLength = 0
			}
			l.got[seq] = seen{infos, resp.StatusCode, resp.Header, resp.Trailer, resp.ContentLength, resp.TransferEncoding, body}
		}
	}
	for i := 1; i < len(runs); i++ {
		for seq := range n {
			key := strconv.Itoa(seq)
			ref, got := runs[0].origin.reqs[key], runs[i].origin.reqs[key]
			if !legs[i].reference && legs[0].reference {
				got.Trailer = namesOnly(t, seq, got.Trailer)
			}
			if !reflect.DeepEqual(ref, got) {
				t.Errorf("request %d at the origin:\n %s: %s\n %s: %s", seq, legs[0].name, show(ref), legs[i].name, show(got))
			}
			if b, a := runs[0].got[seq], runs[i].got[seq]; !reflect.DeepEqual(b, a) {
				t.Errorf("response %d at the client:\n %s: %s\n %s: %s", seq, legs[0].name, show(b), legs[i].name, show(a))
			}
		}
		if len(runs[i].origin.reqs) != len(runs[0].origin.reqs) {
			t.Errorf("%s: the origin recorded %d requests, %s's %d", legs[i].name, len(runs[i].origin.reqs), legs[0].name, len(runs[0].origin.reqs))
		}
	}
	// All reach the origin but the Upgrade requests to an h2c:// target, which
	// net/http's HTTP/2 client refuses (502).
	if len(runs[0].origin.reqs) < n*9/10 {
		t.Errorf("the origin recorded %d requests of %d", len(runs[0].origin.reqs), n)
	}
}

// namesOnly is the trailer tr as ReverseProxy passed it on (names, nil values), after
// checking that the loop passed its value.
func namesOnly(t *testing.T, seq int, tr http.Header) http.Header {
	if tr == nil {
		return nil
	}
	if got, want := tr.Get("X-Body-Sum"), "sum-"+strconv.Itoa(seq); got != want {
		t.Errorf("request %d: trailer X-Body-Sum %q at the origin, want %q", seq, got, want)
	}
	out := http.Header{}
	for k := range tr {
		out[k] = nil
	}
	return out
}

func show(v any) string {
	s := fmt.Sprintf("%+v", v)
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

// TestDifferentialCoversBothLegs: the random requests are not all sent by one leg of
// DefaultTransport, so that TestDifferential compares h1Client itself.
func TestDifferentialCoversBothLegs(t *testing.T) {
	var inline, fallback int
	for seq := range 300 {
		req := randRequest(t, "http://x", seq, false)
		if req.Body == nil {
			req.Body = http.NoBody
		}
		if req.GetBody == nil && req.Body != http.NoBody {
			req.ContentLength = -1 // what a server makes of a body of unknown length
			req.Body = io.NopCloser(strings.NewReader("x"))
		}
		if _, ok := (&h1Client{}).inlineBody(req); ok {
			inline++
		} else {
			fallback++
		}
	}
	if inline < 100 || fallback < 30 {
		t.Fatalf("inline %d, fallback %d of 300", inline, fallback)
	}
}

// TestRequestHeadBytes: appendRequestHead and writeRequest put on the wire exactly
// the bytes http.Request.Write does, field order included, for the random requests
// h1Client writes itself (TestDifferential sees only what the origin parsed), and
// for a few shaped to reach every branch.
func TestRequestHeadBytes(t *testing.T) {
	var reqs []*http.Request
	for seq := range 300 {
		req := randRequest(t, "http://origin.example:8080", seq, false)
		if req.GetBody == nil && req.Body != nil && req.Body != http.NoBody {
			continue // unknown length: net/http's leg
		}
		if req.ContentLength > maxInlineBody {
			continue
		}
		reqs = append(reqs, req)
	}
	odd := mustReq(t, "GET", "http://origin.example/a%20b?x=%01", nil)
	odd.Host = ""                                           // from the URL
	odd.Header["X-Spaced"] = []string{"  padded\tvalue \t"} // trimmed
	odd.Header["X-Empty"] = []string{""}
	odd.Header["Trailer"] = []string{"X-Never"} // excluded from the head
	reqs = append(reqs, odd)
	for i, req := range reqs {
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
		}
		want := new(bytes.Buffer)
		req.Body = io.NopCloser(bytes.NewReader(body))
		if len(body) == 0 && req.ContentLength <= 0 {
			req.Body = nil
		}
		if err := req.Write(want); err != nil {
			t.Fatal(err)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if req.ContentLength <= 0 {
			req.Body = nil
		}
		hp := new([]byte)
		if _, err := appendRequestHead(hp, req); err != nil {
			t.Fatalf("request %d (%s %s %q): %v", i, req.Method, req.URL, req.Header, err)
		}
		got := new(bytes.Buffer)
		bw := bufio.NewWriter(got)
		if err := writeRequest(bw, *hp, req); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		bw.Flush()
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("request %d:\n got  %q\n want %q", i, show(got.String()), show(want.String()))
		}
	}
	zoned := mustReq(t, "GET", "http://[fe80::1%25eth0]:80/", nil)
	spaced := mustReq(t, "GET", "http://origin.example/", nil)
	spaced.Host = "bad host"
	angled := mustReq(t, "GET", "http://origin.example/", nil)
	angled.Host = "bad<host" // net/http sends an empty Host
	badName := mustReq(t, "GET", "http://origin.example/", nil)
	badName.Header["Bad Name"] = []string{"x"} // net/http's Transport refuses it
	for _, req := range []*http.Request{zoned, spaced, angled, badName} {
		if _, err := appendRequestHead(new([]byte), req); !errors.Is(err, errNotPlain) {
			t.Errorf("host %q: %v, want errNotPlain (left to net/http)", req.Host, err)
		}
	}
}
