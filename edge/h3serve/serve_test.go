package h3serve

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/certs"
)

// serveTest serves h on a Server over QUIC on loopback and returns a client
// connection to it.
func serveTest(t *testing.T, h http.Handler) (*http3.ClientConn, *Server) {
	t.Helper()
	cert, err := certs.SelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}})}
	hs := New(srv, Config{HeaderTimeout: 10 * time.Second})
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.ListenEarly(srv.TLSConfig, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctr := &quic.Transport{Conn: mustUDP(t)}
	conn, err := ctr.Dial(ctx, udp.LocalAddr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cc := (&http3.Transport{}).NewClientConn(conn)
	t.Cleanup(func() {
		conn.CloseWithError(0, "")
		ln.Close()
		hs.Close()
		<-done
		tr.Close()
		ctr.Close()
	})
	return cc, hs
}

func mustUDP(t *testing.T) *net.UDPConn {
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestWorkersServeInTurn: once a request is done its goroutine waits for the next
// stream (Server.worker) instead of ending, the next requests are served on it, and
// Close ends the waiting workers.
func TestWorkersServeInTurn(t *testing.T) {
	cc, hs := serveTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Begin(w, r)
		io.WriteString(w, "ok")
	}))
	for range 10 {
		req, _ := http.NewRequest(http.MethodGet, "https://localhost/x", nil)
		if got := roundTrip(t, cc, req); got != "ok" {
			t.Fatalf("response %q", got)
		}
	}
	// The client has its response before the worker has counted itself idle.
	testkit.WaitFor(t, 5*time.Second, "a worker waiting", func() bool { return hs.idle.Load() > 0 })
	if n := hs.idle.Load(); n > 2 {
		t.Errorf("%d workers wait after 10 requests one after the other, want 1 or 2", n)
	}
	hs.Close()
	testkit.WaitFor(t, 5*time.Second, "the waiting workers to end", func() bool { return hs.idle.Load() == 0 })
}

// TestBeginEmptyBody: a GET whose stream ends with its HEADERS frame reaches the
// handler with http.NoBody after Begin (net/http's HTTP/2 server does the same for
// END_STREAM); quic-go alone gives every request a body to read.
func TestBeginEmptyBody(t *testing.T) {
	var nobody, reqs atomic.Int64
	cc, _ := serveTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Begin(w, r)
		reqs.Add(1)
		if r.Body == http.NoBody && r.ContentLength == 0 {
			nobody.Add(1)
		}
		b, err := io.ReadAll(r.Body)
		if err != nil || len(b) > 0 {
			t.Errorf("body %q, %v", b, err)
		}
		io.WriteString(w, "ok")
	}))
	// The quic-go client writes the HEADERS frame and then closes the stream: the FIN
	// comes with the frame nearly always, but not by contract, so some of 20 will do.
	for range 20 {
		req, _ := http.NewRequest(http.MethodGet, "https://localhost/x", nil)
		if got := roundTrip(t, cc, req); got != "ok" {
			t.Fatalf("response %q", got)
		}
	}
	if nobody.Load() == 0 {
		t.Errorf("none of %d bodiless GETs reached the handler with http.NoBody", reqs.Load())
	}
}

// TestBeginKeepsBodies: a request whose stream is still open when Begin runs, or whose
// body is there, keeps its body whatever its method, and reads it to the end — also
// after the header read deadline (Config.HeaderTimeout) has passed, since Begin lifts it.
func TestBeginKeepsBodies(t *testing.T) {
	began := make(chan bool, 1)
	cc, _ := serveTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Begin(w, r)
		began <- r.Body == http.NoBody
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading the body: %v", err)
		}
		w.Write(b)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		name   string
		method string
		late   bool // the body is written once the handler has begun
	}{
		{"GET, body after Begin", http.MethodGet, true},
		{"DELETE, body after Begin", http.MethodDelete, true},
		{"OPTIONS, body with the headers", http.MethodOptions, false},
		{"GET, body with the headers", http.MethodGet, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			str, err := cc.OpenRequestStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// SendRequestHeader writes the header section alone: no Content-Length
			// field for these methods, so the body ends with the stream.
			req, _ := http.NewRequest(c.method, "https://localhost/x", nil)
			if err := str.SendRequestHeader(req); err != nil {
				t.Fatal(err)
			}
			write := func() {
				if _, err := str.Write([]byte("late body")); err != nil {
					t.Fatal(err)
				}
				str.Close()
			}
			if !c.late {
				write()
			}
			select {
			case nb := <-began:
				if nb {
					t.Fatal("the handler got http.NoBody for a request with a body")
				}
			case <-ctx.Done():
				t.Fatal("the handler did not run")
			}
			if c.late {
				write()
			}
			res, err := str.ReadResponse()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			if string(b) != "late body" {
				t.Errorf("the handler read %q, want %q", b, "late body")
			}
		})
	}
}

func roundTrip(t *testing.T, cc *http3.ClientConn, req *http.Request) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cc.RoundTrip(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
