package answer

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/headers"
)

// Every refusal, to a plain client and to a gRPC one, over a real HTTP/2 connection.
func TestAnswers(t *testing.T) {
	answers := map[string]func(http.ResponseWriter, *http.Request){
		"/problem/504": func(w http.ResponseWriter, r *http.Request) {
			Problem(w, r, http.StatusGatewayTimeout, "Gateway Timeout", "the upstream did not answer in time")
		},
		"/quota": func(w http.ResponseWriter, r *http.Request) {
			denying := []headers.Limit{{Name: "burst", Reset: 2500 * time.Millisecond}}
			QuotaExceeded(w, r, denying, 300*time.Millisecond, "quota exceeded for policy burst", []string{"burst"})
		},
		"/closed": func(w http.ResponseWriter, r *http.Request) {
			ReducedCapacity(w, r, "the quota store is unavailable", []string{"global"})
		},
		"/streams": TooManyStreams,
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answers[r.URL.Path](w, r) }))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()

	for _, tc := range []struct {
		path       string
		status     int
		retryAfter string
		typ        string // problem type suffix
		grpc       string
	}{
		{"/problem/504", 504, "", "about:blank", "4"},
		{"/quota", 429, "3", "#quota-exceeded", "8"}, // the denying policy's t (2.5 s), rounded up
		{"/closed", 503, "1", "#temporary-reduced-capacity", "14"},
		{"/streams", 429, "1", "about:blank", "8"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			for _, grpc := range []bool{false, true} {
				req, _ := http.NewRequest("POST", srv.URL+tc.path, nil)
				if grpc {
					req.Header.Set("Content-Type", "application/grpc")
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Fatalf("%s, want HTTP/2", resp.Proto)
				}
				if got := resp.Header.Get("Retry-After"); got != tc.retryAfter {
					t.Errorf("grpc %v: Retry-After %q, want %q", grpc, got, tc.retryAfter)
				}
				if grpc {
					if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != tc.grpc || resp.Header.Get("Grpc-Message") == "" || len(body) != 0 {
						t.Errorf("gRPC: %d grpc-status %q grpc-message %q body %q, want 200 and %s", resp.StatusCode,
							resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"), body, tc.grpc)
					}
					continue
				}
				var doc struct {
					Type   string `json:"type"`
					Status int    `json:"status"`
				}
				if err := json.Unmarshal(body, &doc); err != nil || resp.StatusCode != tc.status || doc.Status != tc.status ||
					!strings.HasSuffix(doc.Type, tc.typ) {
					t.Errorf("%d %s (%v), want %d with type …%s", resp.StatusCode, body, err, tc.status, tc.typ)
				}
				if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Content-Type") != headers.ProblemContentType {
					t.Errorf("Cache-Control %q, Content-Type %q", resp.Header.Get("Cache-Control"), resp.Header.Get("Content-Type"))
				}
			}
		})
	}
}

func TestGRPCStatus(t *testing.T) {
	for status, want := range map[int]int{
		429: 8, 413: 8, 431: 8, 503: 14, 502: 14, 425: 14, 504: 4, 408: 4, 400: 3, 404: 12, 501: 12, 500: 2,
	} {
		if got := GRPCStatus(status); got != want {
			t.Errorf("GRPCStatus(%d) = %d, want %d", status, got, want)
		}
	}
}
