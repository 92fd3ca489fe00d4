package answer_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/h3edge/h3edge/edge/answer"
	"github.com/h3edge/h3edge/headers"
)

func ExampleQuotaExceeded() {
	for _, ct := range []string{"application/json", "application/grpc"} {
		r := httptest.NewRequest("POST", "/pkg.Service/Call", nil)
		r.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		denying := []headers.Limit{{Name: "burst", Reset: 1500 * time.Millisecond}}
		answer.QuotaExceeded(w, r, denying, 0, "quota exceeded for policy burst", []string{"burst"})
		fmt.Println(w.Code, w.Header().Get("Retry-After"), w.Header().Get("Grpc-Status"), w.Body.String())
	}
	// Output:
	// 429 2  {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"quota exceeded for policy burst","violated-policies":["burst"]}
	// 200 2 8
}

func ExampleProblem() {
	w := httptest.NewRecorder()
	answer.Problem(w, httptest.NewRequest("GET", "/", nil), http.StatusBadGateway, "Bad Gateway", "the upstream could not be reached")
	fmt.Println(w.Code, w.Header().Get("Cache-Control"), w.Body.String())
	// Output:
	// 502 no-store {"type":"about:blank","title":"Bad Gateway","status":502,"detail":"the upstream could not be reached"}
}
