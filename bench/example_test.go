package bench_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/quic-go/quic-go"
)

func ExampleParseSources() {
	srcs, err := bench.ParseSources("127.0.0.2-127.0.0.5,127.0.0.9")
	if err != nil {
		panic(err)
	}
	fmt.Println(len(srcs), srcs)
	// Output: 5 [127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5 127.0.0.9]
}

func ExamplePacer() {
	p := bench.Pacer{Start: time.Unix(0, 0), Rate: 400}
	for i := range int64(4) {
		fmt.Print(p.Offset(i), " ")
	}
	fmt.Println(p.Before(time.Second))
	// Output: 0s 2.5ms 5ms 7.5ms 400
}

func ExampleParseHeader() {
	name, value, _ := bench.ParseHeader("x-api-key: k-000042")
	fmt.Printf("%s=%s\n", name, value)
	// Output: X-Api-Key=k-000042
}

func ExampleRun() {
	// A bare HTTP/2 server to load; h3edge or any other server works the same way.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	res, err := bench.Run(context.Background(), bench.Config{
		URL:         srv.URL + "/",
		Proto:       bench.H2,
		Connections: 2,
		Streams:     4,
		Requests:    100,
		Insecure:    true, // httptest's certificate; use Pins or RootCAs for real targets
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Requests, res.Status[200], res.Errors[bench.ErrTimeout], res.Bytes)
	// Output: 100 100 0 200
}

func ExampleClassify() {
	refused := &quic.TransportError{ErrorCode: quic.ConnectionRefused, Remote: true}
	fmt.Println(bench.Classify(fmt.Errorf("dial: %w", refused)))
	fmt.Println(bench.Classify(context.DeadlineExceeded))
	// Output:
	// refused
	// timeout
}

func ExampleConfig_respectLimits() {
	// A server with a quota of 3 requests per minute that says so in its fields.
	var mu sync.Mutex
	left := 3
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("RateLimit-Policy", `"minute";q=3;w=60`)
		if left == 0 {
			w.Header().Set("RateLimit", `"minute";r=0;t=60`)
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		left--
		w.Header().Set("RateLimit", fmt.Sprintf(`"minute";r=%d;t=60`, left))
	}))
	defer srv.Close()

	res, err := bench.Run(context.Background(), bench.Config{
		URL: srv.URL + "/", Proto: bench.H1, Duration: 300 * time.Millisecond, Insecure: true,
		RespectLimits: true, // after r=0 the client waits t (60 s): nothing more is sent
	})
	if err != nil {
		panic(err)
	}
	f := res.Fields
	fmt.Println(res.Status[200], res.Status[429], f.Present, f.Parsed, f.Inconsistent)
	// Output: 3 0 3 3 0
}
