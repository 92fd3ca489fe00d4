package slowbody

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkWatch is what a request with a body pays for the watch when its body comes
// at once: the wrapper, the request's new context and copy, a timer armed per read.
func BenchmarkWatch(b *testing.B) {
	w := httptest.NewRecorder()
	body := strings.NewReader("")
	r := httptest.NewRequest("POST", "/", io.NopCloser(body))
	buf := make([]byte, 16)
	b.ReportAllocs()
	for b.Loop() {
		body.Reset("hello")
		r2, sb := Watch(w, r, 30*time.Second)
		for {
			if _, err := r2.Body.Read(buf); err != nil {
				break
			}
		}
		sb.Stop()
	}
}

// TestWatch: a body that comes at once is read whole and untouched; one that stalls
// past the timeout fails with ErrTimeout and TimedOut says so.
func TestWatch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, b := Watch(w, r, 200*time.Millisecond)
		defer b.Stop()
		_, err := io.Copy(io.Discard, r.Body)
		if err != nil && TimedOut(r) {
			w.WriteHeader(http.StatusRequestTimeout)
			return
		}
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer srv.Close()

	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("all of it"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a body sent at once: %d", resp.StatusCode)
	}

	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("a")) // one byte, then nothing
	resp, err = http.Post(srv.URL, "text/plain", pr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a stalled body: %d, want 408", resp.StatusCode)
	}
}

// TestWatchSkipsNoBody: an HTTP/2 GET, whose HEADERS frame ends the stream, reaches the
// handler with a body of net/http's (not http.NoBody) and is not watched; a request
// announcing "Content-Length: 0", which may leave its stream open, is.
func TestWatchSkipsNoBody(t *testing.T) {
	watched := make(chan bool, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, b := Watch(w, r, time.Second)
		defer b.Stop()
		io.Copy(io.Discard, r.Body)
		watched <- b != nil
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	for _, c := range []struct {
		name  string
		req   func() *http.Request
		watch bool
	}{
		{"GET", func() *http.Request { r, _ := http.NewRequest("GET", srv.URL, nil); return r }, false},
		{"POST, Content-Length: 0", func() *http.Request {
			r, _ := http.NewRequest("POST", srv.URL, http.NoBody)
			r.Header.Set("Content-Length", "0")
			return r
		}, true},
		{"POST with a body", func() *http.Request {
			r, _ := http.NewRequest("POST", srv.URL, strings.NewReader("data"))
			return r
		}, true},
	} {
		resp, err := srv.Client().Do(c.req())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s: served over HTTP/%d, want 2", c.name, resp.ProtoMajor)
		}
		if got := <-watched; got != c.watch {
			t.Errorf("%s: watched %v, want %v", c.name, got, c.watch)
		}
	}
}
