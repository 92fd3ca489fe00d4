package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/h3edge/h3edge/bench"
)

var adminRe = regexp.MustCompile(`admin=(\S+)`)

// TestReloadUnderLoad: h3bench runs over HTTP/3 and HTTP/2 while the configuration is
// reloaded ten times through the admin API, once with an invalid file. No request
// fails; the invalid reload answers 422 with the problem and the old configuration
// keeps serving.
func TestReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "h3edge.yaml")
	write := func(quota int, extra string) {
		os.WriteFile(file, fmt.Appendf(nil, "%spolicies:\n  - {name: burst, key: [ip], quota: %d, window: 1s}\n%s", roomyIP, quota, extra), 0o644)
	}
	write(1000000, "")
	p := startProc(t, nil, "-config", file)
	admin := "http://" + adminRe.FindStringSubmatch(p.log())[1]

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type run struct {
		res *bench.Result
		err error
	}
	runs := make(chan run, 2)
	for _, proto := range []bench.Proto{"h3", "h2"} {
		go func() {
			res, err := bench.Run(ctx, bench.Config{URL: p.url + "/", Proto: proto, Connections: 2, Streams: 8,
				Duration: 3 * time.Second, Insecure: true, Timeout: 5 * time.Second})
			runs <- run{res, err}
		}()
	}
	for i := range 10 {
		if i == 6 {
			write(1000000, "  - {name: broken, quota: -5, window: 1s}\n")
		} else {
			write(1000000+i, "")
		}
		resp, err := http.Post(admin+"/api/v1/reload", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := 200
		if i == 6 {
			want = 422
		}
		if resp.StatusCode != want {
			t.Errorf("reload %d: %d %s, want %d", i, resp.StatusCode, body, want)
		}
		if i == 6 && !strings.Contains(string(body), "policies[1].quota") {
			t.Errorf("invalid reload's answer does not name the problem: %s", body)
		}
		time.Sleep(200 * time.Millisecond) // spread the reloads over the load: pacing, not synchronisation
	}
	for range 2 {
		r := <-runs
		if r.err != nil {
			t.Fatal(r.err)
		}
		var errs int64
		for _, n := range r.res.Errors {
			errs += n
		}
		if errs != 0 || r.res.Status[200] != r.res.Responses || r.res.Responses == 0 {
			t.Errorf("%s under reloads: %d responses, status %v, errors %v", r.res.Proto, r.res.Responses, r.res.Status, r.res.Errors)
		}
		t.Logf("%s: %d requests, all 200, during 10 reloads", r.res.Proto, r.res.Responses)
	}
	// The last valid configuration is in force.
	resp, err := client(t, "h2").Get(p.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if f := resp.Header.Get("RateLimit-Policy"); !strings.Contains(f, "q=1000009") {
		t.Errorf("policy after the reloads: %q, want q=1000009", f)
	}
}

// TestReloadLogFormatAndShutdownTimeout: SIGHUP with log_format: json in the file
// switches the log to JSON, the edge's own logger (component=edge) included; the
// shutdown_timeout the reload set bounds the drain of a request that never ends.
func TestReloadLogFormatAndShutdownTimeout(t *testing.T) {
	var held atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		<-r.Context().Done() // never answers
	}))
	t.Cleanup(up.Close)
	file := filepath.Join(t.TempDir(), "h3edge.yaml")
	write := func(extra string) {
		os.WriteFile(file, []byte(roomyIP+"upstream: "+up.URL+"\n"+extra), 0o644)
	}
	write("shutdown_timeout: 60s\n")
	p := startProc(t, nil, "-config", file)

	write("log_format: json\nshutdown_timeout: 1s\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, `"msg":"configuration reloaded"`)
	var line map[string]any
	for l := range strings.SplitSeq(p.log(), "\n") {
		if strings.Contains(l, `"msg":"configuration reloaded"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
		}
	}
	if line["component"] != "edge" || line["level"] != "INFO" {
		t.Errorf("reload line %v, want the edge's logger in JSON", line)
	}
	waitLog(t, p, `"msg":"reloaded"`) // main's own logger too

	go func() {
		if resp, err := client(t, "h2").Get(p.url + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for held.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the upstream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	if code := p.stop(t, syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("exited %v after SIGTERM, want about the reloaded shutdown_timeout (1s), not 60s", d)
	}
	waitLog(t, p, `"msg":"shutting down"`)
}
