package admin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/h3edge/h3edge/edge/admin"
	"github.com/h3edge/h3edge/edge/config"
)

// The edge fills the hooks from its server; a package with endpoints of its own (the
// certificates of ACME, say) mounts them through Extra, behind the same token.
func ExampleHandler() {
	cfg := config.Default()
	cfg.Admin.Token = "s3cret"
	h := &admin.Handler{
		Config: func() *config.Config { return cfg },
		Extra: map[string]http.Handler{
			"GET /api/v1/certificates": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `["api.example.com"]`)
			}),
		},
	}
	for _, token := range []string{"", "s3cret"} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:9090/api/v1/certificates", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Body.String())
	}
	// Output:
	// 401 {"type":"about:blank","title":"Unauthorized","status":401,"detail":"send Authorization: Bearer with admin.token"}
	//
	// 200 ["api.example.com"]
}
