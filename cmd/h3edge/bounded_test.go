package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hugeList writes a configuration file of about size bytes, most of them a list of
// bad trusted_proxies entries, to dir, and returns its path and the entries.
func hugeList(t *testing.T, dir string, size int) (string, int) {
	t.Helper()
	var b bytes.Buffer
	b.Grow(size + 64)
	b.WriteString("trusted_proxies: [")
	for b.Len() < size {
		b.WriteString("x,")
	}
	b.WriteString("x]\n")
	file := filepath.Join(dir, fmt.Sprintf("list-%d.yaml", size))
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, bytes.Count(b.Bytes(), []byte(",")) + 1
}

// TestValidateHugeFile: h3edge validate on a 50 MB list and on a list just under the
// size limit exits 2, soon, in at most 51 lines: the first 50 problems and a count.
func TestValidateHugeFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		size  int
		lines int
		last  string // "%d": the entries less 50
	}{
		{50 << 20, 1, "the file is larger than 256 KiB, the limit of a configuration file"},
		{250 << 10, 51, "… and %d more problems"},
	} {
		file, n := hugeList(t, dir, tc.size)
		if strings.Contains(tc.last, "%d") {
			tc.last = fmt.Sprintf(tc.last, n-50)
		}
		start := time.Now()
		out, err := exec.Command(binary, "validate", "-config", file).CombinedOutput()
		took := time.Since(start)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("%d bytes: exit %v, want 2\n%.500s", tc.size, err, out)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		t.Logf("%d bytes: exit 2 in %s, %d lines, %d bytes of output", tc.size, took.Round(time.Millisecond), len(lines), len(out))
		if len(lines) != tc.lines || !strings.HasSuffix(lines[len(lines)-1], tc.last) {
			t.Errorf("%d bytes: %d lines ending %q, want %d ending %q", tc.size, len(lines), lines[len(lines)-1], tc.lines, tc.last)
		}
		if took > 10*time.Second { // 2 s is the target; a loose bound against a slow machine
			t.Errorf("%d bytes: took %s", tc.size, took)
		}
	}
}

// TestReloadHugeFile: a reload of a 50 MB configuration file, and of one just under the
// limit full of problems, answers 422 with a short body; the edge's memory stays low
// and it goes on serving the old configuration.
func TestReloadHugeFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "h3edge.yaml")
	os.WriteFile(file, []byte(roomyIP), 0o644)
	p := startProc(t, nil, "-config", file)
	admin := "http://" + adminRe.FindStringSubmatch(p.log())[1]
	for _, size := range []int{50 << 20, 250 << 10} {
		huge, _ := hugeList(t, dir, size)
		os.Rename(huge, file)
		start := time.Now()
		resp, err := http.Post(admin+"/api/v1/reload", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		hwm := vmHWM(t, p.cmd.Process.Pid)
		t.Logf("%d bytes: %d in %s, body %d bytes, edge's peak RSS %d MB", size, resp.StatusCode,
			time.Since(start).Round(time.Millisecond), len(body), hwm>>20)
		if resp.StatusCode != http.StatusUnprocessableEntity || !bytes.Contains(body, []byte(file)) {
			t.Errorf("%d bytes: %d %.500s, want 422 naming the file", size, resp.StatusCode, body)
		}
		if len(body) > 16<<10 {
			t.Errorf("%d bytes: a 422 body of %d bytes", size, len(body))
		}
		if hwm > 200<<20 && !raceEnabled { // the race detector's shadow memory counts too
			t.Errorf("%d bytes: the edge's RSS peaked at %d MB", size, hwm>>20)
		}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(p.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after the refused reloads: %d", resp.StatusCode)
	}
}

// vmHWM returns the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(status)
	if m == nil {
		t.Skip("no VmHWM in /proc/PID/status")
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// TestValidateKeysFile: h3edge validate reads keys.file and tells its problems with
// their places, a repeated key with the line it is already set on.
func TestValidateKeysFile(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	os.WriteFile(keys, []byte("# keys\nalpha: gold\nbeta: free\nalpha: free\n"), 0o644)
	cfg := filepath.Join(dir, "h3edge.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "keys: {file: %s}\n", keys), 0o644)
	out, err := exec.Command(binary, "validate", "-config", cfg).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2\n%s", err, out)
	}
	if want := keys + ":4:1: repeated key; it is already set on line 2\n"; string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	os.WriteFile(keys, []byte("alpha: gold\nbeta: free\n"), 0o644)
	if out, err := exec.Command(binary, "validate", "-config", cfg).CombinedOutput(); err != nil {
		t.Errorf("valid keys file: %v\n%s", err, out)
	}
}

// TestServeManyKeys (H3EDGE_PERF=1): an edge with a keys file of a million keys serves
// within 2 s of its start.
func TestServeManyKeys(t *testing.T) {
	if os.Getenv("H3EDGE_PERF") != "1" {
		t.Skip("a performance bound: set H3EDGE_PERF=1")
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	var b bytes.Buffer
	for i := range 1_000_000 {
		fmt.Fprintf(&b, "key-%016x-%08d: gold\n", uint64(i)*0x9e3779b97f4a7c15, i)
	}
	os.WriteFile(keys, b.Bytes(), 0o644)
	cfg := filepath.Join(dir, "h3edge.yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "%skeys: {file: %s}\npolicies:\n  - {name: gold, match: {plan: gold}, key: [header:X-API-Key], quota: 1000, window: 1s}\n", roomyIP, keys), 0o644)

	start := time.Now()
	p := startProc(t, nil, "-config", cfg)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, _ := http.NewRequest("GET", p.url+"/", nil)
	last := uint64(999_999)
	req.Header.Set("X-API-Key", fmt.Sprintf("key-%016x-%08d", last*0x9e3779b97f4a7c15, last))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	took := time.Since(start)
	rss := vmHWM(t, p.cmd.Process.Pid)
	t.Logf("1 000 000 keys (%d MB): first response %d after %s; peak RSS %d MB", b.Len()>>20, resp.StatusCode, took.Round(time.Millisecond), rss>>20)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"gold"`) {
		t.Errorf("the last key's request: %d, RateLimit-Policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	if took > 2*time.Second {
		t.Errorf("first response %s after the start, want at most 2 s", took)
	}
}
