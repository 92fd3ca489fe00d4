package edge

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The tests of this file hold the README's promises about the public listeners: the
// header read timeout on every protocol, the settings advertised, and the edge's own
// answers (problem documents, counted, logged).

// TestStats429CountsStreamRefusals: the dashboard's 429s are the stream budget's
// prebuilt 429s too, the ones refused_streams_total counts, so both tell one story.
func TestStats429CountsStreamRefusals(t *testing.T) {
	e := startEdge(t, func(c *Config) { c.IP.Streams = Rate{Rate: 0.001, Burst: 2} })
	for _, proto := range []string{"h2", "h1"} {
		c := clientFor(t, proto)
		for range 5 {
			resp, err := c.Get(e.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	// Both protocols share 127.0.0.1's budget: 2 served, 8 prebuilt 429s.
	refused := e.metrics.refusedStr[protoH1][reasonRate].Load() + e.metrics.refusedStr[protoH2][reasonRate].Load()
	if refused != 8 {
		t.Fatalf("refused_streams_total{proto=~h1|h2} = %d, want 8", refused)
	}
	resp, err := adminClient.Get("http://" + e.AdminAddr().String() + "/api/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st statsBody
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	var total, tooMany uint64
	for _, p := range []string{"h1", "h2"} {
		total += st.Requests[p]["total"]
		tooMany += st.Requests[p]["429"]
	}
	if tooMany != refused || total != 10 {
		t.Errorf("stats: %d 429s of %d requests, want %d of 10 (refused_streams_total)", tooMany, total, refused)
	}
}

// TestUpstreamTLSFailureLogged: an https:// upstream whose certificate the edge does
// not trust answers 502, and the log says why.
func TestUpstreamTLSFailureLogged(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	var logs syncBuffer
	e := startEdgeWith(t, func(c *Config) { c.Upstream = up.URL }, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, p := range protos {
		resp, body := do(t, clientFor(t, p.name), "GET", e.url+"/", nil, nil)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %q %s, want a 502 problem", p.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	out := logs.String()
	if n := strings.Count(out, `msg="upstream exchange failed"`); n != len(protos) {
		t.Errorf("%d upstream failures logged, want %d:\n%s", n, len(protos), out)
	}
	if !strings.Contains(out, `reason="x509: certificate signed by unknown authority"`) {
		t.Errorf("the log does not name the TLS failure:\n%s", out)
	}
}

// TestHeader431ProblemEachProtocol: a header section over 64 KiB gets a 431 problem
// document, counted in requests_total, on HTTP/3 as on HTTP/2 and HTTP/1.1.
func TestHeader431ProblemEachProtocol(t *testing.T) {
	e := startEdge(t, nil)
	big := strings.Repeat("a", 100<<10)
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			pi := map[string]int{"h1": protoH1, "h2": protoH2, "h3": protoH3}[p.name]
			before := e.metrics.requests[pi][http.StatusRequestHeaderFieldsTooLarge-minCode].Load()
			resp, body := do(t, clientFor(t, p.name), "GET", e.url+"/", map[string]string{"X-Big": big}, nil)
			var doc struct{ Status int }
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Content-Type") != "application/problem+json" ||
				json.Unmarshal(body, &doc) != nil || doc.Status != 431 {
				t.Errorf("%d %q %q, want a 431 problem document", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			if n := e.metrics.requests[pi][http.StatusRequestHeaderFieldsTooLarge-minCode].Load() - before; n != 1 {
				t.Errorf("requests_total{proto=%q,code=\"431\"} grew by %d, want 1", p.name, n)
			}
		})
	}
}
