package accesslog

import (
	"bufio"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// entry is a request with every field set, the path and host carrying bytes a client
// may choose to break a line with.
func entry() *Entry {
	e := &Entry{
		Time: time.Date(2026, 12, 1, 18, 30, 5, 123_000_000, time.UTC), Proto: "HTTP/3.0", Method: "GET",
		Host: "api.example.com", Path: "/v1/items/\"x\"\n\\\xff", Status: 429, Bytes: 187,
		Duration: 1500 * time.Microsecond, Client: netip.MustParsePrefix("2001:db8:1::/64"),
	}
	e.Route, e.Upstream, e.Target = "api", "pool", "http://10.0.0.1:9000"
	e.Key, e.HasKey, e.Decision = [8]byte{0x96, 0x09, 0x47, 0x84, 0x94, 0x2a, 0x0e, 0xa8}, true, "denied"
	return e
}

// TestJSON: one line, valid JSON, every key of DESIGN.md §11 with its value.
func TestJSON(t *testing.T) {
	line := AppendJSON(nil, entry())
	if !strings.HasSuffix(string(line), "}\n") || strings.Count(string(line), "\n") != 1 {
		t.Fatalf("not one line: %q", line)
	}
	var got map[string]any
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	want := map[string]any{"time": "2026-12-01T18:30:05.123Z", "proto": "HTTP/3.0", "method": "GET",
		"host": "api.example.com", "path": "/v1/items/\"x\"\n\\\ufffd", "status": 429.0, "bytes": 187.0,
		"duration_ms": 1.5, "route": "api", "upstream": "pool", "target": "http://10.0.0.1:9000",
		"client": "2001:db8:1::/64", "key": "96094784942a0ea8", "decision": "denied"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d keys, want %d: %s", len(got), len(want), line)
	}
	empty := AppendJSON(nil, &Entry{Time: time.Unix(0, 0)})
	if err := json.Unmarshal(empty, &got); err != nil || got["key"] != "" || got["client"] != "" || got["route"] != "" {
		t.Errorf("an empty entry: %v %s", err, empty)
	}
}

// TestCommon: the Common Log Format, its request line escaped.
func TestCommon(t *testing.T) {
	got := string(AppendCommon(nil, entry()))
	want := `2001:db8:1::/64 - 96094784942a0ea8 [01/Dec/2026:18:30:05 +0000] "GET /v1/items/\"x\"\x0a\\\xff HTTP/3.0" 429 187` + "\n"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	got = string(AppendCommon(nil, &Entry{Time: time.Unix(0, 0).UTC(), Method: "GET", Path: "/", Proto: "HTTP/2.0", Status: 204}))
	if want := `- - - [01/Jan/1970:00:00:00 +0000] "GET / HTTP/2.0" 204 -` + "\n"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// FuzzJSON: whatever bytes a client puts in the path and host, the line is one valid
// JSON object that gives back the same text where it was valid UTF-8.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{"/", "/a\"b", "/\x00\x1f\x7f", "/\xff\xfe", "/é/😀", `\u0000`} {
		f.Add(s, "h")
	}
	f.Fuzz(func(t *testing.T, path, host string) {
		line := AppendJSON(nil, &Entry{Path: path, Host: host})
		if strings.Count(string(line), "\n") != 1 {
			t.Fatalf("not one line: %q", line)
		}
		var got struct{ Path, Host string }
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		if utf8.ValidString(path) && got.Path != path {
			t.Errorf("path %q came back as %q", path, got.Path)
		}
	})
}

// TestFullBufferDrops: a Writer whose output stops taking lines (a pipe nobody reads)
// drops lines instead of blocking Log, counts them, and once the output drains has
// written every line it did not count, whole.
func TestFullBufferDrops(t *testing.T) {
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var dropped atomic.Uint64
	w := NewWriter(pw, Config{BufferBytes: 4 << 10, Dropped: &dropped})
	e := entry()
	// The pipe holds some tens of KiB, the Writer 8: a few thousand lines fill both.
	logged := 0
	for dropped.Load() == 0 && logged < 1_000_000 {
		w.Log(e)
		logged++
	}
	if dropped.Load() == 0 {
		t.Fatalf("%d lines logged to a stalled output and none dropped", logged)
	}
	for range 100 { // full: every one of these is dropped at once
		w.Log(e)
		logged++
	}
	lines := make(chan int)
	go func() {
		n := 0
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var v map[string]any
			if json.Unmarshal(sc.Bytes(), &v) != nil || v["status"] != 429.0 {
				t.Errorf("line %d is not whole: %q", n, sc.Text())
			}
			n++
		}
		lines <- n
	}()
	w.Close()
	pw.Close()
	n := <-lines
	t.Logf("logged %d, written %d, dropped %d", logged, n, dropped.Load())
	if uint64(n)+dropped.Load() != uint64(logged) {
		t.Errorf("written %d + dropped %d != logged %d", n, dropped.Load(), logged)
	}
	w.Log(e)
	if got := dropped.Load(); uint64(n)+got != uint64(logged)+1 {
		t.Errorf("a line logged after Close was not counted as dropped")
	}
}

// TestWriteErrorCounts: the lines of a failed write are counted and the error told.
func TestWriteErrorCounts(t *testing.T) {
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // writes fail: EPIPE
	errs := make(chan error, 10)
	w := NewWriter(pw, Config{OnError: func(err error) { errs <- err }})
	w.Log(entry())
	w.Close()
	pw.Close()
	if w.Dropped() != 1 || len(errs) == 0 {
		t.Errorf("dropped %d, errors %d; want 1 and at least one", w.Dropped(), len(errs))
	}
}

// TestLogAllocs: formatting and queueing a line allocates nothing.
func TestLogAllocs(t *testing.T) {
	for _, f := range []Format{JSON, Common} {
		w := NewWriter(io.Discard, Config{Format: f})
		e := entry()
		if n := testing.AllocsPerRun(10_000, func() { w.Log(e) }); n != 0 {
			t.Errorf("format %d: Log allocates %v times", f, n)
		}
		w.Close()
	}
}

var commonLine = regexp.MustCompile(`^\S+ - \S+ \[[^]]+\] "(?:[^"\\]|\\.)*" \d{3} (\d+|-)$`)

// TestCommonShape: lines with hostile bytes in every field still have the format's
// shape.
func TestCommonShape(t *testing.T) {
	for _, p := range []string{"/", "/a b", `/"]`, "/\r\n127.0.0.1 - - [x] \"GET / HTTP/1.1\" 200 1", ""} {
		line := strings.TrimSuffix(string(AppendCommon(nil, &Entry{Method: "GET", Path: p, Proto: "HTTP/1.1", Status: 200})), "\n")
		if !commonLine.MatchString(line) {
			t.Errorf("path %q: %q", p, line)
		}
	}
}

// BenchmarkLog measures formatting and queueing one line, from parallel goroutines,
// the Writer's batched writes to io.Discard included.
func BenchmarkLog(b *testing.B) {
	for _, f := range []struct {
		name string
		f    Format
	}{{"json", JSON}, {"common", Common}} {
		b.Run(f.name, func(b *testing.B) {
			w := NewWriter(io.Discard, Config{Format: f.f})
			defer w.Close()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				e := entry()
				for pb.Next() {
					w.Log(e)
				}
			})
		})
	}
}

// TestOpenSample: Open appends to an existing file, and a log of sample 0.25 logs
// about a quarter of the requests (the bounds are 10 standard deviations wide).
func TestOpenSample(t *testing.T) {
	path := t.TempDir() + "/access.log"
	if err := os.WriteFile(path, []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, 0.25, Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	logged := 0
	for range n {
		if l.Sampled() {
			l.Log(entry())
			logged++
		}
	}
	l.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if lines[0] != "kept" || len(lines) != logged+1 {
		t.Errorf("the file has %d lines starting %q, want \"kept\" and the %d logged", len(lines), lines[0], logged)
	}
	if logged < 2000 || logged > 3000 {
		t.Errorf("sample 0.25 logged %d of %d", logged, n)
	}
	if full, _ := Open(path, 1, Config{}); full != nil {
		for range 100 {
			if !full.Sampled() {
				t.Fatal("sample 1 left a request out")
			}
		}
		full.Close()
	}
	if _, err := Open(t.TempDir()+"/no/such/dir/a.log", 1, Config{}); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
}
