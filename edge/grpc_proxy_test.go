package edge

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/h3edge/h3edge/edge/config"
)

// grpcThroughEdge starts a grpc-go server (health, with service "api" serving, and
// reflection) behind an h2c:// target of route "rpc" of an edge with policies, and
// returns a grpc-go client of the edge over HTTP/2 with TLS, closed when the test ends.
func grpcThroughEdge(t *testing.T, policies ...config.Policy) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{"rpc": {Targets: []string{"h2c://" + ln.Addr().String()}}}
		c.Routes = []config.Route{{Name: "rpc", Upstream: "rpc"}}
		c.Policies = policies
	})
	conn, err := grpc.NewClient(e.Addr().String(),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestGRPCThroughH2C: grpc-go's client calls through h3edge (HTTP/2 over TLS) to a
// grpc-go server behind an h2c:// target: a unary call, one whose error status travels
// in the trailers, and a bidirectional stream whose messages interleave.
func TestGRPCThroughH2C(t *testing.T) {
	conn := grpcThroughEdge(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	hc := healthpb.NewHealthClient(conn)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "api"})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("unary Check: %v %v, want SERVING", resp, err)
	}
	// An error status comes in the trailers only (a "trailers-only" response has it in
	// the header): the server's NOT_FOUND must reach the client as such.
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service: %v, want NOT_FOUND", err)
	}

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		// One request, one answer, on the same stream: each answer must arrive before
		// the next request is sent, so the edge streams both ways.
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""},
		}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv %d: %v", i, err)
		}
		if n := len(r.GetListServicesResponse().GetService()); n < 2 {
			t.Fatalf("recv %d: %d services, want health and reflection", i, n)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil || status.Code(err) != codes.OK && err.Error() != "EOF" {
		t.Errorf("end of stream: %v, want EOF", err)
	}
}

// TestGRPCDenial: a policy's denial reaches grpc-go's own client as the status gRPC
// clients act on — RESOURCE_EXHAUSTED, not an HTTP 429 the client reports as a
// transport failure — with the RateLimit fields and Retry-After among the metadata,
// while the calls the policy admits reach the upstream.
func TestGRPCDenial(t *testing.T) {
	conn := grpcThroughEdge(t, config.Policy{Name: "rpc-burst", Match: config.Match{Route: "rpc"}, Quota: 2, Window: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	hc := healthpb.NewHealthClient(conn)
	for i := range 2 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "api"}); err != nil {
			t.Fatalf("call %d of a quota of 2: %v", i+1, err)
		}
	}
	var header, trailer metadata.MD
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "api"}, grpc.Header(&header), grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED", err)
	}
	// A Trailers-Only response: grpc-go hands its fields over as header or trailer
	// metadata depending on its version; the fields must be in one of them.
	md := metadata.Join(header, trailer)
	for _, f := range []string{"ratelimit", "ratelimit-policy", "retry-after"} {
		if len(md.Get(f)) == 0 {
			t.Errorf("the denial's metadata has no %s: %v", f, md)
		}
	}
	if got := md.Get("ratelimit-policy"); len(got) > 0 && !strings.Contains(got[0], `"rpc-burst"`) {
		t.Errorf("RateLimit-Policy %q does not name the policy", got)
	}
	t.Logf("denial: %v; metadata %v", err, md)
}
