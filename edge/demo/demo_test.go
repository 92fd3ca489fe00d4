package demo

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestConfigHooks: the echo reports what ClientAddr says, a bad parameter goes to
// BadRequest and a failed body read to BodyFailed with the read's error; without hooks
// the peer's host is reported.
func TestConfigHooks(t *testing.T) {
	var bad string
	var failed error
	h := New(Config{
		ClientAddr: func(*http.Request) string { return "192.0.2.7" },
		BadRequest: func(w http.ResponseWriter, _ *http.Request, detail string) { bad = detail; w.WriteHeader(499) },
		BodyFailed: func(w http.ResponseWriter, _ *http.Request, err error) { failed = err; w.WriteHeader(498) },
	})
	echo := func(h http.Handler) map[string]any {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/x", strings.NewReader("four")))
		var got map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("echo: %v: %q", err, rec.Body)
		}
		return got
	}
	if got := echo(h); got["client_addr"] != "192.0.2.7" || got["body_bytes"] != 4.0 || got["path"] != "/x" {
		t.Errorf("echo with ClientAddr = %v", got)
	}
	if got := echo(New(Config{})); got["client_addr"] != "192.0.2.1" { // httptest's RemoteAddr
		t.Errorf("echo without hooks: client_addr %v, want the peer's host 192.0.2.1", got["client_addr"])
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/slow?ms=60001", nil))
	if rec.Code != 499 || bad != "query parameter ms must be an integer from 0 to 60000" {
		t.Errorf("/slow?ms=60001: %d, BadRequest got %q", rec.Code, bad)
	}

	errRead := errors.New("quota ran out")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/", failingReader{errRead}))
	if rec.Code != 498 || !errors.Is(failed, errRead) {
		t.Errorf("failed body: %d, BodyFailed got %v", rec.Code, failed)
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }
