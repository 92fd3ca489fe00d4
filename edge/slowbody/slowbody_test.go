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
