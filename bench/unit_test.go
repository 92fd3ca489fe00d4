package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func TestPacer(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, rate := range []float64{1, 3, 500, 7919, 100_000} {
		p := Pacer{Start: start, Rate: rate}
		want := float64(time.Second) / rate
		for i := int64(0); i < 2000; i++ {
			gap := p.At(i + 1).Sub(p.At(i))
			if d := float64(gap) - want; d > 1 || d < -1 {
				t.Fatalf("rate %g: gap %d→%d is %v, want %v ± 1ns", rate, i, i+1, gap, time.Duration(want))
			}
		}
		if got := p.At(int64(rate)).Sub(start); got != time.Second && rate == float64(int64(rate)) {
			t.Errorf("rate %g: request %d at %v, want 1s", rate, int64(rate), got)
		}
	}
	for _, tc := range []struct {
		rate float64
		d    time.Duration
		want int64
	}{
		{500, time.Second, 500},
		{500, 0, 0},
		{500, time.Millisecond, 1},
		{500, 2 * time.Millisecond, 1},
		{500, 2*time.Millisecond + 1, 2},
		{3, time.Second, 3},
		{0.5, 3 * time.Second, 2},
	} {
		p := Pacer{Start: start, Rate: tc.rate}
		if got := p.Before(tc.d); got != tc.want {
			t.Errorf("Pacer{Rate: %g}.Before(%v) = %d, want %d", tc.rate, tc.d, got, tc.want)
		}
	}
}

func TestSummarizeKnownData(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 10000; v++ {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	l := summarize(h, 10000)
	within := func(name string, got time.Duration, wantUs int64) {
		want := time.Duration(wantUs) * time.Microsecond
		if diff := got - want; diff < 0 || diff > want/1000+time.Microsecond {
			t.Errorf("%s = %v, want %v (+0.1%%)", name, got, want)
		}
	}
	within("p50", l.P50, 5000)
	within("p90", l.P90, 9000)
	within("p99", l.P99, 9900)
	within("p99.9", l.P999, 9990)
	within("max", l.Max, 10000)
	if l.Mean < 5000*time.Microsecond || l.Mean > 5010*time.Microsecond {
		t.Errorf("mean = %v, want about 5000.5µs", l.Mean)
	}
	if (summarize(NewHistogram(), 0) != Latency{}) {
		t.Error("empty histogram: want zero Latency")
	}
}

func TestShardClampsAndMerges(t *testing.T) {
	a, b := newShard(), newShard()
	now := time.Now()
	a.response(200, 2*time.Hour, 10, now) // beyond the histogram: clamped, max kept
	b.response(429, time.Millisecond, 5, now.Add(time.Second))
	b.failure(ErrTimeout, now)
	var r Result
	r.merge([]*shard{a, b}, now.Add(-time.Second))
	if r.Requests != 3 || r.Responses != 2 || r.Status[200] != 1 || r.Status[429] != 1 || r.Errors[ErrTimeout] != 1 {
		t.Errorf("merged: %+v", r)
	}
	if r.Latency.Max != 2*time.Hour {
		t.Errorf("max = %v, want 2h", r.Latency.Max)
	}
	if r.Duration != 2*time.Second || r.RequestsPerSecond != 1.5 || r.Bytes != 15 {
		t.Errorf("duration %v, rate %v, bytes %d", r.Duration, r.RequestsPerSecond, r.Bytes)
	}
	if r.Share429 != 1.0/3 {
		t.Errorf("share_429 = %v, want 1/3", r.Share429)
	}
	b2, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	if err := json.Unmarshal(b2, &j); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"requests_per_second", "requests", "duration_seconds", "latency_us", "status", "errors", "share_429", "bytes"} {
		if _, ok := j[f]; !ok {
			t.Errorf("JSON lacks %q: %s", f, b2)
		}
	}
	lat := j["latency_us"].(map[string]any)
	for _, f := range []string{"p50", "p90", "p99", "p999", "max"} {
		if _, ok := lat[f]; !ok {
			t.Errorf("latency_us lacks %q", f)
		}
	}
	if j["status"].(map[string]any)["429"] != 1.0 || j["errors"].(map[string]any)["timeout"] != 1.0 {
		t.Errorf("status/errors in JSON: %s", b2)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "429: 1") || !strings.Contains(text.String(), "timeout: 1") {
		t.Errorf("text summary:\n%s", text.String())
	}
}

func TestClassify(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("round trip: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want ErrorKind
	}{
		{"nil", nil, ""},
		{"quic refused", wrap(&quic.TransportError{ErrorCode: quic.ConnectionRefused, Remote: true}), ErrRefused},
		{"tcp refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ErrRefused},
		{"request rejected", wrap(&http3.Error{Remote: true, ErrorCode: http3.ErrCodeRequestRejected}), ErrReset},
		{"stream reset", wrap(&quic.StreamError{ErrorCode: 0x10b, Remote: true}), ErrReset},
		{"conn closed by app", wrap(&quic.ApplicationError{ErrorCode: 0x100, Remote: true}), ErrReset},
		{"tcp reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ErrReset},
		{"eof", wrap(io.EOF), ErrReset},
		{"deadline", wrap(context.DeadlineExceeded), ErrTimeout},
		{"idle timeout", wrap(&quic.IdleTimeoutError{}), ErrTimeout},
		{"handshake timeout", wrap(&quic.HandshakeTimeoutError{}), ErrTimeout},
		{"pin", wrap(ErrPinMismatch), ErrTLS},
		{"unknown CA", wrap(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), ErrTLS},
		{"quic crypto", wrap(&quic.TransportError{ErrorCode: 0x100 + 42}), ErrTLS},
		{"alert", wrap(tls.AlertError(40)), ErrTLS},
		{"other", errors.New("something"), ErrOther},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestParseSources(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		last string
		ok   bool
	}{
		{"127.0.0.2-127.0.0.200", 199, "127.0.0.200", true},
		{"127.0.0.2", 1, "127.0.0.2", true},
		{"127.0.0.2, 127.0.0.9-127.0.0.10", 3, "127.0.0.10", true},
		{"127.0.0.255-127.0.1.1", 3, "127.0.1.1", true},
		{"::1", 1, "::1", true},
		{"127.0.0.5-127.0.0.2", 0, "", false},
		{"::1-::2", 0, "", false},
		{"127.0.0.1-", 0, "", false},
		{"", 0, "", false},
		{"10.0.0.0-10.255.255.255", 0, "", false}, // too many
	} {
		got, err := ParseSources(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseSources(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && (len(got) != tc.n || got[len(got)-1].String() != tc.last) {
			t.Errorf("ParseSources(%q) = %d addresses ending %v, want %d ending %s", tc.in, len(got), got[len(got)-1], tc.n, tc.last)
		}
	}
}

func TestKeyPicker(t *testing.T) {
	names := keyNames(1000)
	if names[42] != "k-000042" || keyName(1234567) != "k-1234567" {
		t.Fatalf("key names: %q %q", names[42], keyName(1234567))
	}
	count := func(k *keyPicker) map[string]int {
		m := map[string]int{}
		for range 10000 {
			m[k.next()]++
		}
		return m
	}
	u := count(newKeyPicker(10, 0, 1, names))
	for i := range 10 {
		if n := u[keyName(i)]; n < 800 || n > 1200 {
			t.Errorf("uniform: %s drawn %d times of 10000, want about 1000", keyName(i), n)
		}
	}
	z := count(newKeyPicker(1000, 1.5, 1, names))
	if z["k-000000"] < z["k-000001"] || z["k-000001"] < z["k-000010"] || z["k-000000"] < 2000 {
		t.Errorf("zipf 1.5: k0 %d, k1 %d, k10 %d", z["k-000000"], z["k-000001"], z["k-000010"])
	}
	if newKeyPicker(0, 0, 1, nil) != nil {
		t.Error("no keys: want nil picker")
	}
}

func TestPinParsing(t *testing.T) {
	pin := testPin(t)
	// A digest whose base64 begins with '/' (1 in 64 random keys): once "sha256//"
	// was cut from "sha256/" + it, leaving 43 characters.
	slash := "/" + pin[1:]
	for _, want := range []string{pin, slash} {
		for _, p := range []string{want, "sha256/" + want, "sha256//" + want, " " + want + " "} {
			got, err := parsePins([]string{p})
			if err != nil {
				t.Errorf("parsePins(%q): %v", p, err)
				continue
			}
			if w, _ := base64.StdEncoding.DecodeString(want); len(got) != 1 || !bytes.Equal(got[0][:], w) {
				t.Errorf("parsePins(%q) = %x, want %x", p, got, w)
			}
		}
	}
	for _, p := range []string{"", "abc", pin[:20]} {
		if _, err := parsePins([]string{p}); err == nil {
			t.Errorf("parsePins(%q): want an error", p)
		}
	}
	_, leaf := selfSigned(t)
	tc, err := TLSConfig("127.0.0.1", nil, []string{pin}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}); err != nil {
		t.Errorf("right pin refused: %v", err)
	}
	if err := tc.VerifyConnection(tls.ConnectionState{}); !errors.Is(err, ErrPinMismatch) {
		t.Errorf("no certificate: %v, want ErrPinMismatch", err)
	}
}
