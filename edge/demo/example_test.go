package demo_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/h3edge/h3edge/edge/demo"
)

// The zero Config is the origin as the bare baseline serves it.
func ExampleNew() {
	srv := httptest.NewServer(demo.New(demo.Config{}))
	defer srv.Close()
	for _, path := range []string{"/bytes?n=30", "/bytes?n=-1"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s %q\n", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	// Output:
	// 200 application/octet-stream "abcdefghijklmnopqrstuvwxyzabcd"
	// 400 text/plain; charset=utf-8 "query parameter n must be an integer from 0 to 1073741824\n"
}
