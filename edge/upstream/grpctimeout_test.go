package upstream

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestGRPCTimeout(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1H", time.Hour, true},
		{"10M", 10 * time.Minute, true},
		{"30S", 30 * time.Second, true},
		{"99999999m", 99999999 * time.Millisecond, true},
		{"250u", 250 * time.Microsecond, true},
		{"7n", 7, true},
		{"0S", 0, true},
		{"99999999H", math.MaxInt64, true}, // 11 000 years: the largest Duration
		{"", 0, false},
		{"S", 0, false},
		{"10", 0, false},
		{"10s", 0, false},
		{"123456789S", 0, false}, // 9 digits
		{"-1S", 0, false},
		{"1.5S", 0, false},
		{" 1S", 0, false},
	} {
		got, ok := grpcTimeout(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("grpcTimeout(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzGRPCTimeout: any value is refused or read as grpc-go's client writes it
// (digits, then one unit), never negative.
func FuzzGRPCTimeout(f *testing.F) {
	for _, s := range []string{"1H", "99999999H", "5m", "0n", "12x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := grpcTimeout(s)
		if !ok {
			return
		}
		if d < 0 {
			t.Fatalf("grpcTimeout(%q) = %v", s, d)
		}
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
		if err != nil || n < 0 || len(s) > 9 || s[0] == '+' || s[0] == '-' {
			t.Fatalf("grpcTimeout(%q) accepted %v", s, d)
		}
	})
}

// TestGRPCDeadline: only a gRPC call over HTTP/2 or HTTP/3 has one, and no client
// lifts the pool's bounds past maxGRPCDeadline.
func TestGRPCDeadline(t *testing.T) {
	for _, tc := range []struct {
		proto       int
		ctype, tout string
		want        time.Duration
	}{
		{2, "application/grpc", "10S", 10 * time.Second},
		{3, "application/grpc+proto", "5M", 5 * time.Minute},
		{2, "application/grpc", "99999999H", maxGRPCDeadline},
		{2, "application/grpc-web", "10S", 0},
		{2, "application/json", "10S", 0},
		{1, "application/grpc", "10S", 0},
		{2, "application/grpc", "10x", 0},
	} {
		req := &http.Request{ProtoMajor: tc.proto, Header: http.Header{"Content-Type": {tc.ctype}, "Grpc-Timeout": {tc.tout}}}
		if got := grpcDeadline(req); got != tc.want {
			t.Errorf("HTTP/%d %s grpc-timeout %s: %v, want %v", tc.proto, tc.ctype, tc.tout, got, tc.want)
		}
	}
}
