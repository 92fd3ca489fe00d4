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

// seen is what the client saw of one response.
type seen struct {
	Status           int
	Header, Trailer  http.Header
	ContentLength    int64
	TransferEncoding []string
	Body             []byte
}

// recordingOrigin records every request by its X-Seq and answers as X-Seq's number
// decides: a random status, header fields, and a body of fixed or unknown length
// (flushed in pieces), with or without trailers.
type recordingOrigin struct {
	*httptest.Server
	mu   sync.Mutex
	reqs map[string]recorded
}

func startRecordingOrigin(t *testing.T) *recordingOrigin {
	o := &recordingOrigin{reqs: map[string]recorded{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		for i := range rng.IntN(4) {
			w.Header().Add(fmt.Sprintf("X-Resp-%d", i%2), randToken(rng))
		}
		data := bytes.Repeat([]byte(randToken(rng)), rng.IntN(3000))
		chunked := rng.IntN(2) == 0
		trailers := chunked && rng.IntN(2) == 0
		if trailers {
			w.Header().Set("Trailer", "X-Checksum")
		}
		if !chunked {
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
	}))
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

// randRequest builds request seq: a method, header fields (repeated ones too), and a
// body that is absent, empty, short or long with a Content-Length, or of unknown
// length (chunked on HTTP/1.1) with or without trailers.
func randRequest(t *testing.T, base string, seq int) *http.Request {
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
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
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

// TestDifferential sends the same randomised requests through a pool on net/http's
// Transport (the proxy leg before h1Client) and through one on DefaultTransport, each
// to its own recording origin, from HTTP/1.1 and HTTP/2 clients: what each origin saw,
// and what each client got, must be identical. Requests h1Client carries itself (no
// body, bodies up to maxInlineBody with a length, empty probed bodies) and those it
// hands to its fallback are both among them.
func TestDifferential(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		t.Run(proto, func(t *testing.T) {
			type leg struct {
				origin *recordingOrigin
				front  *httptest.Server
				got    map[int]seen
			}
			var legs [2]*leg
			for i, nt := range []func(Target, *Config) Transport{NetHTTPTransport, DefaultTransport} {
				o := startRecordingOrigin(t)
				p := newPool(t, Config{Targets: []Target{tgt(t, o.URL, 1)}, NewTransport: nt})
				s := httptest.NewUnstartedServer(p)
				if proto == "HTTP/2" {
					s.EnableHTTP2 = true
					s.StartTLS()
				} else {
					s.Start()
				}
				t.Cleanup(func() { s.Close(); p.Close() })
				legs[i] = &leg{origin: o, front: s, got: map[int]seen{}}
			}
			const n = 300
			for seq := range n {
				for _, l := range legs {
					req := randRequest(t, l.front.URL, seq)
					resp, err := l.front.Client().Do(req)
					if err != nil {
						t.Fatalf("request %d: %v", seq, err)
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
					l.got[seq] = seen{resp.StatusCode, resp.Header, resp.Trailer, resp.ContentLength, resp.TransferEncoding, body}
				}
			}
			for seq := range n {
				key := strconv.Itoa(seq)
				before, after := legs[0].origin.reqs[key], legs[1].origin.reqs[key]
				if !reflect.DeepEqual(before, after) {
					t.Errorf("request %d at the origin:\n net/http: %s\n new:      %s", seq, show(before), show(after))
				}
				if b, a := legs[0].got[seq], legs[1].got[seq]; !reflect.DeepEqual(b, a) {
					t.Errorf("response %d at the client:\n net/http: %s\n new:      %s", seq, show(b), show(a))
				}
			}
			if len(legs[1].origin.reqs) != n {
				t.Errorf("the origin recorded %d requests of %d", len(legs[1].origin.reqs), n)
			}
		})
	}
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
		req := randRequest(t, "http://x", seq)
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
		req := randRequest(t, "http://origin.example:8080", seq)
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
