package edge

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/h3edge/h3edge/bench/testkit"
	"github.com/h3edge/h3edge/edge/config"
)

// streamService is grpc-go's interop TestService with the streaming calls a test
// supplies.
type streamService struct {
	testgrpc.UnimplementedTestServiceServer
	out    func(*testgrpc.StreamingOutputCallRequest, testgrpc.TestService_StreamingOutputCallServer) error
	in     func(testgrpc.TestService_StreamingInputCallServer) error
	duplex func(testgrpc.TestService_FullDuplexCallServer) error
}

func (s *streamService) StreamingOutputCall(r *testgrpc.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
	return s.out(r, st)
}
func (s *streamService) StreamingInputCall(st testgrpc.TestService_StreamingInputCallServer) error {
	return s.in(st)
}
func (s *streamService) FullDuplexCall(st testgrpc.TestService_FullDuplexCallServer) error {
	return s.duplex(st)
}

// streamsThroughEdge serves srv with grpc-go behind an h2c:// target of route "rpc"
// of an edge (mutate, if not nil, changes its configuration) and returns a grpc-go
// client of the edge over HTTP/2 with TLS, with grpc-go's default options but opts.
func streamsThroughEdge(t *testing.T, srv *streamService, mutate func(*config.Config), opts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, srv)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"rpc": {Targets: []string{"h2c://" + ln.Addr().String()}}}
		c.Routes = []config.Route{{Name: "rpc", Upstream: "rpc"}}
		if mutate != nil {
			mutate(c)
		}
	})
	conn, err := grpc.NewClient(e.Addr().String(), append(opts,
		grpc.WithTransportCredentials(credentials.NewTLS(insecureTLS.Clone())))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// grpc-go's default client sends a PING after each burst of data it receives, to
// size its window (BDP estimation): a chatty bidirectional stream sends hundreds.
// They are not a PING flood: the connection is not closed, the source not banned.
func TestGRPCWindowPingsAreNotAFlood(t *testing.T) {
	c := streamsThroughEdge(t, &streamService{duplex: func(st testgrpc.TestService_FullDuplexCallServer) error {
		for {
			m, err := st.Recv()
			if err != nil {
				return nil
			}
			if err := st.Send(&testgrpc.StreamingOutputCallResponse{Payload: m.Payload}); err != nil {
				return err
			}
		}
	}}, nil)
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := c.FullDuplexCall(ctx)
		i := 0
		for ; err == nil && i < 400; i++ { // 400 round trips of an empty message
			if err = s.Send(&testgrpc.StreamingOutputCallRequest{}); err == nil {
				_, err = s.Recv()
			}
		}
		cancel()
		if err != nil {
			t.Fatalf("round %d: failed after %d round trips: %v", round, i, err)
		}
	}
}

// staticWindow turns grpc-go's window sizing, and the PINGs it sends, off.
var staticWindow = []grpc.DialOption{grpc.WithInitialWindowSize(16 << 20), grpc.WithInitialConnWindowSize(16 << 20)}

// A gRPC watch that is answered, then cancelled, again and again, is not a Rapid
// Reset: the connection serves on past the reset bound (100 more resets than
// completed streams).
func TestGRPCCancelledWatchesAreNotRapidReset(t *testing.T) {
	c := streamsThroughEdge(t, &streamService{out: func(r *testgrpc.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
		st.Send(&testgrpc.StreamingOutputCallResponse{})
		<-st.Context().Done()
		return nil
	}}, nil, staticWindow...)
	for i := range 150 { // open a watch, read its first event, cancel it, open the next
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		cancel()
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
}

// body_read_timeout does not end a gRPC stream whose client is quiet: a subscriber
// that sent its request message and listens, and a client stream that sends a small
// message now and then, live past it (200 ms here) — as a plain request body that
// quiet does not (TestSlowClients).
func TestGRPCQuietStreamsOutliveBodyReadTimeout(t *testing.T) {
	const timeout, quiet = 200 * time.Millisecond, 600 * time.Millisecond
	c := streamsThroughEdge(t, &streamService{
		duplex: func(st testgrpc.TestService_FullDuplexCallServer) error {
			if _, err := st.Recv(); err != nil {
				return err
			}
			time.Sleep(quiet) // the event comes after three body_read_timeouts of quiet
			return st.Send(&testgrpc.StreamingOutputCallResponse{})
		},
		in: func(st testgrpc.TestService_StreamingInputCallServer) error {
			n := int32(0)
			for {
				if _, err := st.Recv(); err == io.EOF {
					return st.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: n})
				} else if err != nil {
					return err
				}
				n++
			}
		},
	}, func(c *config.Config) { c.Limits.BodyReadTimeout = timeout }, staticWindow...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.FullDuplexCall(ctx)
	if err == nil {
		err = s.Send(&testgrpc.StreamingOutputCallRequest{})
	}
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil {
		t.Errorf("subscriber quiet for %v: %v", quiet, err)
	}
	in, err := c.StreamingInputCall(ctx)
	for i := 0; err == nil && i < 3; i++ {
		if err = in.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, 50)}}); err == nil {
			time.Sleep(quiet / 2) // 50 B per 300 ms: under 1 KiB per body_read_timeout
		}
	}
	if err == nil {
		var resp *testgrpc.StreamingInputCallResponse
		if resp, err = in.CloseAndRecv(); err == nil && resp.AggregatedPayloadSize != 3 {
			t.Errorf("client stream: the server got %d messages, want 3", resp.AggregatedPayloadSize)
		}
	}
	if err != nil {
		t.Errorf("client stream of a message per %v: %v", quiet/2, err)
	}
}

// health: {protocol: grpc} checks a grpc-go target with gRPC's own health protocol:
// SERVING keeps it in rotation, NOT_SERVING of the service asked about takes it out
// (calls get UNAVAILABLE at once), SERVING again brings it back.
func TestGRPCHealthCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"rpc": {
			Targets: []string{"h2c://" + ln.Addr().String()},
			Health: &config.HealthCheck{Protocol: "grpc", Service: "api", Interval: 50 * time.Millisecond,
				Timeout: 50 * time.Millisecond, Unhealthy: 1, Healthy: 1},
		}}
		c.Routes = []config.Route{{Name: "rpc", Upstream: "rpc"}}
	})
	conn, err := grpc.NewClient(e.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(insecureTLS.Clone())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	call := func() codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "api"})
		return status.Code(err)
	}
	state := func() string {
		var st struct {
			Upstreams []struct{ Targets []struct{ State string } }
		}
		adminGet(t, e.Server, "/api/v1/upstreams", &st)
		return st.Upstreams[0].Targets[0].State
	}
	testkit.WaitFor(t, 5*time.Second, "the target healthy by its gRPC checks", func() bool { return state() == "healthy" })
	if c := call(); c != codes.OK {
		t.Fatalf("a call to a SERVING target: %v", c)
	}
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_NOT_SERVING)
	testkit.WaitFor(t, 5*time.Second, "NOT_SERVING to take the target out", func() bool { return state() == "ejected" })
	if c := call(); c != codes.Unavailable {
		t.Errorf("a call while the only target is NOT_SERVING: %v, want UNAVAILABLE from the edge", c)
	}
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_SERVING)
	testkit.WaitFor(t, 5*time.Second, "SERVING to bring the target back", func() bool { return state() == "healthy" })
	if c := call(); c != codes.OK {
		t.Errorf("a call once SERVING again: %v", c)
	}
}

// killListener resets every connection it accepted at once, as a killed process's
// kernel would.
type killListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *killListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *killListener) kill() {
	l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

// A gRPC stream that breaks after its first message ends with a gRPC status, as a
// gRPC server would end it: UNAVAILABLE when the upstream goes away, DEADLINE_EXCEEDED
// when the route's max_duration passes — not a reset, which grpc-go reports as
// INTERNAL (a server's bug). Over HTTP/2 with grpc-go's client; over HTTP/3, which
// grpc-go does not speak, with a call made by hand with quic-go's client (one empty
// message each way, as StreamingOutputCall's are) and the status read from the
// trailers.
func TestGRPCStreamBrokenMidwayEndsWithStatus(t *testing.T) {
	watch := func(r *testgrpc.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
		st.Send(&testgrpc.StreamingOutputCallResponse{})
		<-st.Context().Done()
		return nil
	}
	for _, tc := range []struct {
		name        string
		want        codes.Code
		maxDuration time.Duration
	}{
		{"upstream killed", codes.Unavailable, 0},
		{"max_duration", codes.DeadlineExceeded, 300 * time.Millisecond},
	} {
		for _, proto := range []string{"h2", "h3"} {
			t.Run(tc.name+"/"+proto, func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				kl := &killListener{Listener: ln}
				gs := grpc.NewServer()
				testgrpc.RegisterTestServiceServer(gs, &streamService{out: watch})
				go gs.Serve(kl)
				t.Cleanup(gs.Stop)
				e := startEdge(t, func(c *config.Config) {
					c.Upstreams = map[string]config.Upstream{"rpc": {Targets: []string{"h2c://" + ln.Addr().String()}}}
					c.Routes = []config.Route{{Name: "rpc", Upstream: "rpc", MaxDuration: tc.maxDuration}}
				})
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				brk := func() {
					if tc.maxDuration == 0 {
						kl.kill()
					}
				}
				if proto == "h3" {
					if got := brokenOverHTTP3(ctx, t, e.url, brk); got != strconv.Itoa(int(tc.want)) {
						t.Errorf("grpc-status %q, want %d", got, tc.want)
					}
					return
				}
				conn, err := grpc.NewClient(e.Addr().String(), append(staticWindow, grpc.WithTransportCredentials(credentials.NewTLS(insecureTLS.Clone())))...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				s, err := testgrpc.NewTestServiceClient(conn).StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
				if err == nil {
					_, err = s.Recv()
				}
				if err != nil {
					t.Fatal(err)
				}
				brk()
				if _, err = s.Recv(); status.Code(err) != tc.want {
					t.Fatalf("%v, want %v", err, tc.want)
				}
			})
		}
	}
}

// brokenOverHTTP3 calls StreamingOutputCall at the edge at url over HTTP/3, reads the
// first message, calls brk, and returns the grpc-status of the stream's trailers.
func brokenOverHTTP3(ctx context.Context, t *testing.T, url string, brk func()) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/grpc.testing.TestService/StreamingOutputCall",
		bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := clientFor(t, "h3").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, first); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first message: %d %x %v", resp.StatusCode, first, err)
	}
	brk()
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after the break: %x %v, want the stream's clean end", rest, err)
	}
	return resp.Trailer.Get("Grpc-Status")
}

// A server-streaming call's response header comes with its first message (grpc-go
// sends them together), which may come later than the pool's timeout. A client that
// set a deadline is given it: the edge waits for the header as long as the client
// said it would. Without a deadline the pool's timeout holds. A client deadline that
// passes at the edge is the client's DEADLINE_EXCEEDED, not the target's failure: it
// ejects nothing.
func TestGRPCClientDeadlineBoundsTheFirstMessage(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c := streamsThroughEdge(t, &streamService{out: func(r *testgrpc.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
		if len(r.ResponseParameters) == 0 { // a watch with nothing to say
			<-st.Context().Done()
			return nil
		}
		select { // the first event comes after three of the pool's timeouts
		case <-time.After(3 * timeout):
		case <-st.Context().Done():
			return nil
		}
		return st.Send(&testgrpc.StreamingOutputCallResponse{})
	}}, func(c *config.Config) {
		u := c.Upstreams["rpc"]
		u.Timeout = timeout
		u.Passive = config.Passive{Failures: 2, Within: time.Minute, Eject: time.Minute}
		c.Upstreams["rpc"] = u
	})
	event := &testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{{}}}
	call := func(ctx context.Context, req *testgrpc.StreamingOutputCallRequest) error {
		s, err := c.StreamingOutputCall(ctx, req)
		if err == nil {
			_, err = s.Recv()
		}
		return err
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := call(ctx, event); err != nil {
		t.Fatalf("a call with a 10s deadline whose first message comes after %v: %v, want it", 3*timeout, err)
	}

	start := time.Now()
	err := call(t.Context(), event) // no deadline: no grpc-timeout
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 2*timeout+time.Second {
		t.Errorf("without a deadline: %v after %v, want DEADLINE_EXCEEDED at the pool's timeout (%v)", err, time.Since(start), timeout)
	}
	// That was the target's timeout: one failure of the two that eject. The client
	// deadlines that pass now are not the target's.
	for i := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 2*timeout)
		err := call(ctx, &testgrpc.StreamingOutputCallRequest{})
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("watch %d past its deadline: %v, want DEADLINE_EXCEEDED", i, err)
		}
	}
	if _, err := c.EmptyCall(t.Context(), &testgrpc.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("after three client deadlines: %v, want the target's UNIMPLEMENTED (a client's deadline ejected it)", err)
	}
}

// TestGRPCBidiOutlivesThePoolTimeoutAfterCloseSend: a bidirectional call, no client
// deadline, whose client ends its sending side (CloseSend) after the first answer while
// the server goes on streaming a message every 100 ms, well within read_timeout, ends
// with OK after all 12: once the response header came, the pool's timeout (300 ms
// here) has no business with it. The try's header timer, re-armed by the upload's
// end, cut it one timeout after CloseSend with UNAVAILABLE.
func TestGRPCBidiOutlivesThePoolTimeoutAfterCloseSend(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c := streamsThroughEdge(t, &streamService{duplex: func(st testgrpc.TestService_FullDuplexCallServer) error {
		if _, err := st.Recv(); err != nil {
			return err
		}
		for range 12 {
			if err := st.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}}, func(c *config.Config) {
		u := c.Upstreams["rpc"]
		u.Timeout = timeout
		u.ReadTimeout = 5 * time.Second
		c.Upstreams["rpc"] = u
	})
	s, err := c.FullDuplexCall(t.Context()) // no deadline: no grpc-timeout
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n := 0
	for {
		if _, err = s.Recv(); err != nil {
			break
		}
		if n++; n == 1 {
			s.CloseSend() // nothing more to send: END_STREAM
		}
	}
	if err != io.EOF || n != 12 {
		t.Fatalf("bidi stream: %d of 12 messages, then %v after %v; want all, then OK", n, err, time.Since(start).Round(time.Millisecond))
	}
}
