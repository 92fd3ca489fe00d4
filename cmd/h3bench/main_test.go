package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{}, // no -url
		{"-url", "https://127.0.0.1:1/", "-d", "1s", "-n", "5"}, // exclusive
		{"-url", "https://127.0.0.1:1/", "-proto", "h4"},
		{"-url", "https://127.0.0.1:1/", "-sources", "127.0.0.9-127.0.0.2"},
		{"-url", "https://127.0.0.1:1/", "-H", "no colon"},
		{"-url", "https://127.0.0.1:1/", "-pin", "nope"},
		{"-url", "https://127.0.0.1:1/", "scenario"},
		{"-bogus"},
	} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("run(%q) = %d, want 2; stderr: %s", args, code, errOut.String())
		}
	}
}

func TestRunWritesJSON(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test") != "yes" || r.Header.Get("X-Api-Key") == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "out.json")
	var out, errOut strings.Builder
	code := run([]string{"-url", srv.URL + "/", "-proto", "h1", "-c", "2", "-n", "20", "-warmup", "0",
		"-insecure", "-H", "X-Test: yes", "-keys", "3", "-json", file, "-timeout", "2s"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Requests int64            `json:"requests"`
		Status   map[string]int64 `json:"status"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	if j.Requests != 20 || j.Status["200"] != 20 {
		t.Errorf("JSON: %s", b)
	}
	if !strings.Contains(out.String(), "200: 20") {
		t.Errorf("summary:\n%s", out.String())
	}
}

func TestScenarioCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{[]string{"scenario"}, 2, "noisy-neighbour"},
		{[]string{"scenario", "nope"}, 2, "unknown scenario"},
		{[]string{"scenario", "baseline", "extra"}, 2, "unexpected argument"},
		{[]string{"scenario", "-bogus"}, 2, "flag provided but not defined"},
		{[]string{"serve-bare", "extra"}, 2, "unexpected argument"},
		{[]string{"attack"}, 2, "[-svg FILE]"},
		{[]string{"attack", "nope", "-svg", "x.svg"}, 2, "unknown attack"},
	} {
		var out, errOut strings.Builder
		code := run(tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.out) {
			t.Errorf("run(%q) = %d, want %d with %q; stdout:\n%s\nstderr:\n%s", tc.args, code, tc.code, tc.out, out.String(), errOut.String())
		}
	}
}

func TestRespectLimitsFlag(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", `"p";q=100;w=60`)
		w.Header().Set("RateLimit", `"p";r=50;t=60`)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "out.json")
	var out, errOut strings.Builder
	code := run([]string{"-url", srv.URL + "/", "-proto", "h1", "-n", "10", "-warmup", "0", "-insecure",
		"-respect-limits", "-json", file}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Fields  struct{ Present, Parsed, Inconsistent int64 } `json:"fields"`
		Respect *struct{ Waits int64 }                        `json:"respect_limits"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	if j.Fields.Present != 10 || j.Fields.Parsed != 10 || j.Fields.Inconsistent != 0 || j.Respect == nil {
		t.Errorf("JSON: %s", b)
	}
	if !strings.Contains(out.String(), "RateLimit present 10, parsed 10, inconsistent 0") {
		t.Errorf("summary:\n%s", out.String())
	}
}
