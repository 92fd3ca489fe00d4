package edge

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/h3edge/h3edge/edge/config"
)

// TestStalledResponseBodyIsCutOff: an origin that sends its header and the start of
// a body, then nothing, holds the client's response only for the pool's read_timeout:
// then the response is cut off (a reset on HTTP/2 and HTTP/3, a closed connection on
// HTTP/1.1), never completed as if whole. A body that keeps coming, however slowly,
// is not cut off, nor one whose origin waits for a long upload that keeps coming. Each way to a target is tried: an
// http:// target's own client (h1Client), its net/http fallback (a body over 64 KiB)
// and net/http's HTTP/2 (h2c://).
func TestStalledResponseBodyIsCutOff(t *testing.T) {
	const readTimeout = 600 * time.Millisecond
	stop := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if r.URL.Path == "/duplex" { // answers as it reads the upload, to its end
			http.NewResponseController(w).EnableFullDuplex()
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "got %d", n)
			return
		}
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/trickle" { // a byte every third of the read timeout: alive
			for i := range 4 {
				w.Write([]byte{byte('a' + i)})
				w.(http.Flusher).Flush()
				select {
				case <-time.After(readTimeout / 3):
				case <-r.Context().Done():
					return
				}
			}
			return
		}
		io.WriteString(w, "first part ") // no length: the edge passes it on at once
		w.(http.Flusher).Flush()
		select { // the rest never comes
		case <-stop:
		case <-r.Context().Done():
		}
	})
	h1 := httptest.NewServer(handler)
	h2c := &httptest.Server{Listener: mustListen(t), Config: &http.Server{Handler: handler}}
	h2c.Config.Protocols = new(http.Protocols)
	h2c.Config.Protocols.SetUnencryptedHTTP2(true)
	h2c.Start()
	t.Cleanup(func() { close(stop); h1.Close(); h2c.Close() })
	e := startEdge(t, func(c *config.Config) {
		c.Upstreams = map[string]config.Upstream{
			"h1":  {Targets: []string{h1.URL}, ReadTimeout: readTimeout},
			"h2c": {Targets: []string{"h2c://" + h2c.Listener.Addr().String()}, ReadTimeout: readTimeout},
		}
		c.Routes = []config.Route{
			{Name: "h2c", Upstream: "h2c", Match: config.RouteMatch{PathPrefix: "/h2c/"}, StripPrefix: "/h2c"},
			{Name: "h1", Upstream: "h1"},
		}
	})
	big := bytes.Repeat([]byte("x"), 100<<10) // over h1Client's 64 KiB: its net/http fallback
	for _, p := range protos {
		for _, way := range []struct {
			name, prefix string
			body         []byte
		}{{"h1client", "", nil}, {"fallback", "", big}, {"h2c", "/h2c", nil}} {
			t.Run(p.name+"/"+way.name, func(t *testing.T) {
				t.Parallel()
				c := clientFor(t, p.name)
				send := func(path string) (*http.Response, error) {
					method, body := http.MethodGet, io.Reader(nil)
					if way.body != nil {
						method, body = http.MethodPost, bytes.NewReader(way.body)
					}
					req, _ := http.NewRequestWithContext(t.Context(), method, e.url+way.prefix+path, body)
					return c.Do(req)
				}
				start := time.Now()
				resp, err := send("/stall")
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				took := time.Since(start)
				if err == nil || !strings.HasPrefix(string(got), "first part ") {
					t.Fatalf("stalled body: %q, %v after %v; want its first part, then an error", got, err, took)
				}
				if took < readTimeout*4/5 || took > readTimeout+4*time.Second {
					t.Errorf("stalled body cut off after %v, want at the read timeout (%v)", took, readTimeout)
				}
				t.Logf("stalled body: %q, then %v after %v", got, err, took.Round(time.Millisecond))

				if p.name != "h2" {
					return // the trickle and the upload are the target side's: one client protocol tells them
				}
				{
					// An upload that takes longer than the read timeout, while the
					// origin reads it before it answers: activity, not a stall.
					pr, pw := io.Pipe()
					go func() {
						for range 6 {
							if _, err := pw.Write(bytes.Repeat([]byte("u"), 1000)); err != nil {
								return
							}
							time.Sleep(readTimeout / 3) // a slow uploader, not a synchronisation
						}
						pw.Close()
					}()
					req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+way.prefix+"/duplex", pr)
					resp, err := c.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					got, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || string(got) != "got 6000" {
						t.Errorf("an upload longer than the read timeout, answered at its end: %q, %v; want got 6000", got, err)
					}
				}
				resp, err = send("/trickle")
				if err != nil {
					t.Fatal(err)
				}
				got, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(got) != "abcd" {
					t.Errorf("a body that keeps coming: %q, %v; want abcd", got, err)
				}
			})
		}
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
