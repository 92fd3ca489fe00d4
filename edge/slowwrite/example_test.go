package slowwrite_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/h3edge/h3edge/edge/slowwrite"
)

// A handler streams 64 MiB to a client that reads none of it: once a write has waited
// 200 ms, it fails, and the handler stops.
func Example() {
	failed := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := slowwrite.Watch(w, 200*time.Millisecond)
		defer sw.Stop()
		chunk := make([]byte, 32<<10)
		for range 2048 {
			if _, err := sw.Write(chunk); err != nil {
				failed <- err
				return
			}
		}
		failed <- nil
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and read nothing
	select {
	case err := <-failed:
		fmt.Println("write failed:", err != nil)
	case <-time.After(30 * time.Second):
		fmt.Println("still writing after 30 s")
	}
	// Output: write failed: true
}
