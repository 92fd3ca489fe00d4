package route

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func name(rt *Route) string {
	if rt == nil {
		return ""
	}
	return rt.Name
}

func TestMatch(t *testing.T) {
	table := New([]Config{
		{Name: "exact", Host: "API.example.com", PathPrefix: "/v1/"},
		{Name: "wild", Host: "*.example.com"},
		{Name: "post", Methods: []string{"POST"}, PathPrefix: "/upload"},
		{Name: "tenant", Headers: map[string]string{"x-tenant": "acme"}},
	})
	for _, tc := range []struct {
		method, host, path string
		hdr                map[string]string
		want               string
	}{
		{"GET", "api.example.com", "/v1/x", nil, "exact"},
		{"GET", "api.example.com:8443", "/v1/x", nil, "exact"},
		{"GET", "Api.Example.COM", "/v1/x", nil, "exact"},
		{"GET", "api.example.com", "/v2/x", nil, "wild"},
		{"GET", "a.b.example.com", "/", nil, "wild"},
		{"GET", "example.com", "/", nil, ""},
		{"GET", "badexample.com", "/", nil, ""},
		{"POST", "other", "/upload/f", nil, "post"},
		{"PUT", "other", "/upload/f", nil, ""},
		{"GET", "other", "/", map[string]string{"X-Tenant": "acme"}, "tenant"},
		{"GET", "other", "/", map[string]string{"X-Tenant": "other"}, ""},
		{"GET", "[::1]:443", "/", nil, ""},
	} {
		r := httptest.NewRequest(tc.method, "http://x"+tc.path, nil)
		r.Host = tc.host
		for k, v := range tc.hdr {
			r.Header.Set(k, v)
		}
		if got := name(table.Match(r)); got != tc.want {
			t.Errorf("%s %s%s %v: route %q, want %q", tc.method, tc.host, tc.path, tc.hdr, got, tc.want)
		}
	}
}

func TestServeLimits(t *testing.T) {
	var gotPath string
	var gotBody int
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath = r.URL.Path
		b := make([]byte, 100)
		for {
			n, err := r.Body.Read(b)
			gotBody += n
			if err != nil {
				if BodyTooLarge(r) != nil {
					w.WriteHeader(413)
				}
				return
			}
		}
	})
	rt := New([]Config{{Name: "r", PathPrefix: "/v1", StripPrefix: "/v1", MaxBody: 10, Handler: h}}).Routes()[0]
	tooLarge := func(w http.ResponseWriter, r *http.Request, _ *Route) { w.WriteHeader(413) }

	for _, tc := range []struct {
		path, want string
	}{{"/v1/items", "/items"}, {"/v1", "/"}, {"/v1x", "/x"}} {
		r := httptest.NewRequest("GET", "http://x"+tc.path, nil)
		rt.Serve(httptest.NewRecorder(), r, tooLarge)
		if gotPath != tc.want || r.URL.Path != tc.path {
			t.Errorf("%s: upstream path %q (request keeps %q), want %q", tc.path, gotPath, r.URL.Path, tc.want)
		}
	}
	w := httptest.NewRecorder()
	gotBody = 0
	rt.Serve(w, httptest.NewRequest("POST", "http://x/v1/", strings.NewReader(strings.Repeat("a", 11))), tooLarge)
	if w.Code != 413 || gotBody != 0 {
		t.Errorf("Content-Length 11 over 10: %d, handler read %d, want 413 before the handler", w.Code, gotBody)
	}
	w = httptest.NewRecorder()
	r := httptest.NewRequest("POST", "http://x/v1/", strings.NewReader(strings.Repeat("a", 11)))
	r.ContentLength = -1 // streamed
	rt.Serve(w, r, tooLarge)
	if w.Code != 413 || gotBody > 10 {
		t.Errorf("streamed 11 over 10: %d after %d bytes, want 413 within the bound", w.Code, gotBody)
	}
	w = httptest.NewRecorder()
	r = httptest.NewRequest("POST", "http://x/v1/", strings.NewReader(strings.Repeat("a", 10)))
	r.ContentLength = -1
	gotBody = 0
	rt.Serve(w, r, tooLarge)
	if w.Code != 200 || gotBody != 10 {
		t.Errorf("streamed 10, the bound: %d after %d bytes, want 200 with all", w.Code, gotBody)
	}
}

func ExampleTable_Match() {
	table := New([]Config{
		{Name: "api", Host: "*.example.com", PathPrefix: "/v1/"},
		{Name: "rest"},
	})
	for _, u := range []string{"https://eu.example.com/v1/users", "https://example.com/v1/users"} {
		fmt.Println(u, "→", table.Match(httptest.NewRequest("GET", u, nil)).Name)
	}
	// Output:
	// https://eu.example.com/v1/users → api
	// https://example.com/v1/users → rest
}
