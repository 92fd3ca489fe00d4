package h1serve_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/h3edge/h3edge/certs"
	"github.com/h3edge/h3edge/edge/h1serve"
)

// An http.Server serves HTTP/2 itself and HTTP/1.1 through h1serve: Serve is given the
// listener of Split, and Shutdown goes to both.
func ExampleServer_Split() {
	cert, err := certs.SelfSigned("localhost")
	if err != nil {
		panic(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}

	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }),
		ReadHeaderTimeout: 10 * time.Second,
	}
	h1 := h1serve.New(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(h1.Split(tls.NewListener(ln, tc)))

	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		res, err := (&http.Client{Transport: tr}).Get("https://" + ln.Addr().String() + "/")
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		tr.CloseIdleConnections()
		fmt.Println(string(b))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println(srv.Shutdown(ctx), h1.Shutdown(ctx))
	// Output:
	// HTTP/1.1
	// HTTP/2.0
	// <nil> <nil>
}
