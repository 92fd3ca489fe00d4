package plainhttp_test

import (
	"fmt"
	"net/http"

	"github.com/h3edge/h3edge/edge/plainhttp"
)

// A request on http_listen that is no ACME validation is redirected to https, on the
// edge's port.
func ExampleListen() {
	s, err := plainhttp.Listen("127.0.0.1:0", plainhttp.Config{HTTPSPort: func() int { return 8443 }})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	go s.Serve()

	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://%s/v1/items?page=2", s.Addr()), nil)
	req.Host = "api.example"
	resp, err := c.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Location"))
	// Output:
	// 308 https://api.example:8443/v1/items?page=2
}
