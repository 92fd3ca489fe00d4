package bench_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
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
