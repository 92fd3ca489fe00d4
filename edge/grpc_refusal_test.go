package edge

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// The edge's own refusals to a gRPC client are gRPC statuses (DESIGN §9): HTTP 200,
// grpc-status and grpc-message in the response header, no problem document, and the
// RateLimit fields and Retry-After of the refusal kept. A client that is not gRPC gets
// the problem document on the same edge. Over HTTP/2 and HTTP/3, as gRPC clients speak.
func TestGRPCRefusals(t *testing.T) {
	e := startEdge(t, withPolicies(config.Policy{
		Name: "calls", Key: []string{"header:X-API-Key", "ip"}, Quota: 1, Window: time.Minute,
	}))
	grpc := map[string]string{"Content-Type": "application/grpc+proto", "Te": "trailers"}
	for _, proto := range []string{"h2", "h3"} {
		t.Run(proto, func(t *testing.T) {
			c := clientFor(t, proto)
			key := "grpc-" + proto
			hdr := map[string]string{"X-API-Key": key}
			for k, v := range grpc {
				hdr[k] = v
			}
			if resp, _ := do(t, c, "POST", e.url+"/pkg.Service/Call", hdr, strings.NewReader("\x00\x00\x00\x00\x00")); resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "" {
				t.Fatalf("first call: %d grpc-status %q, want 200 from the origin", resp.StatusCode, resp.Header.Get("Grpc-Status"))
			}
			resp, body := do(t, c, "POST", e.url+"/pkg.Service/Call", hdr, strings.NewReader("\x00\x00\x00\x00\x00"))
			if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "8" || resp.Header.Get("Content-Type") != "application/grpc" {
				t.Fatalf("over quota: %d grpc-status %q content-type %q, want 200, 8 (RESOURCE_EXHAUSTED), application/grpc",
					resp.StatusCode, resp.Header.Get("Grpc-Status"), resp.Header.Get("Content-Type"))
			}
			if msg := resp.Header.Get("Grpc-Message"); !strings.Contains(msg, "calls") {
				t.Errorf("grpc-message %q, want the policy named", msg)
			}
			if len(body) != 0 {
				t.Errorf("body %q, want none (trailers-only)", body)
			}
			lim := sfItem(t, resp.Header.Values("RateLimit"), "calls")
			ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || lim["r"] != int64(0) || int64(ra) < lim["t"].(int64) || resp.Header.Get("RateLimit-Policy") == "" {
				t.Errorf("fields of the gRPC refusal: Retry-After %q, RateLimit %v, RateLimit-Policy %q",
					resp.Header.Get("Retry-After"), lim, resp.Header.Get("RateLimit-Policy"))
			}

			// A bad client key is INVALID_ARGUMENT, not a 400.
			bad := map[string]string{"X-API-Key": strings.Repeat("k", 257)}
			for k, v := range grpc {
				bad[k] = v
			}
			if resp, _ := do(t, c, "POST", e.url+"/pkg.Service/Call", bad, nil); resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "3" {
				t.Errorf("bad key: %d grpc-status %q, want 200 and 3", resp.StatusCode, resp.Header.Get("Grpc-Status"))
			}

			// The same refusal to a client that is not gRPC stays a problem document.
			resp, body = do(t, c, "GET", e.url+"/", map[string]string{"X-API-Key": key}, nil)
			if resp.StatusCode != 429 || resp.Header.Get("Grpc-Status") != "" ||
				resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "quota-exceeded") {
				t.Errorf("plain client: %d grpc-status %q %s, want the 429 problem document", resp.StatusCode, resp.Header.Get("Grpc-Status"), body)
			}
		})
	}
}

// A failed upstream exchange answers a gRPC client UNAVAILABLE (502), and the stream
// budget's prebuilt 429 RESOURCE_EXHAUSTED.
func TestGRPCUpstreamAndStreamBudget(t *testing.T) {
	e := startEdge(t, func(c *config.Config) {
		c.Upstream = "http://127.0.0.1:1" // nothing listens on port 1
		c.IP.Streams = config.Rate{Rate: 0.01, Burst: 1}
	})
	c := clientFor(t, "h2")
	hdr := map[string]string{"Content-Type": "application/grpc"}
	resp, _ := do(t, c, "POST", e.url+"/pkg.Service/Call", hdr, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "14" || resp.Header.Get("Content-Type") != "application/grpc" {
		t.Errorf("upstream down: %d grpc-status %q, want 200 and 14 (UNAVAILABLE)", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
	resp, _ = do(t, c, "POST", e.url+"/pkg.Service/Call", hdr, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "8" || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("over the stream budget: %d grpc-status %q Retry-After %q, want 200, 8 and 1",
			resp.StatusCode, resp.Header.Get("Grpc-Status"), resp.Header.Get("Retry-After"))
	}
	resp, _ = do(t, c, "GET", e.url+"/", nil, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("plain client over the stream budget: %d Cache-Control %q, want 429 no-store", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
}
