package upstream_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/h3edge/h3edge/edge/upstream"
)

func ExampleNew() {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin saw %s", r.URL.Path)
	}))
	defer origin.Close()
	u, _ := url.Parse(origin.URL)

	p, err := upstream.New(upstream.Config{
		Name:    "api",
		Targets: []upstream.Target{{URL: u, Weight: 1}},
		Retries: 1,
		Passive: upstream.Passive{Failures: 5, Within: 10 * time.Second, Eject: 30 * time.Second},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	front := httptest.NewServer(p) // the pool is an http.Handler
	defer front.Close()
	resp, err := http.Get(front.URL + "/v1/users")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println(p.Stats().Targets[0].State)
	// Output:
	// 200 origin saw /v1/users
	// healthy
}
