package headers

import (
	"errors"
	"testing"
	"time"
)

func TestPolicyField(t *testing.T) {
	tests := []struct {
		name string
		ps   []Policy
		want string
	}{
		{
			name: "draft example",
			ps: []Policy{
				{Name: "burst", Quota: 100, Window: 60 * time.Second},
				{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
			},
			want: `"burst";q=100;w=60, "daily";q=1000;w=86400`,
		},
		{
			name: "requests unit omitted",
			ps:   []Policy{{Name: "default", Quota: 50, Window: 30 * time.Second, Unit: UnitRequests}},
			want: `"default";q=50;w=30`,
		},
		{
			name: "content bytes",
			ps:   []Policy{{Name: "peruser", Quota: 65535, Window: 10 * time.Second, Unit: UnitContentBytes}},
			want: `"peruser";q=65535;qu="content-bytes";w=10`,
		},
		{
			name: "concurrency has no window",
			ps:   []Policy{{Name: "inflight", Quota: 10, Unit: UnitConcurrentRequests}},
			want: `"inflight";q=10;qu="concurrent-requests"`,
		},
		{
			name: "sub-second window rounds up",
			ps:   []Policy{{Name: "a", Quota: 1, Window: 1500 * time.Millisecond}, {Name: "b", Quota: 1, Window: time.Nanosecond}},
			want: `"a";q=1;w=2, "b";q=1;w=1`,
		},
		{
			name: "escaped name and limits of range",
			ps:   []Policy{{Name: `a"b\c`, Quota: 999_999_999_999_999, Window: time.Second}, {Name: " ", Quota: 0, Window: time.Second}},
			want: `"a\"b\\c";q=999999999999999;w=1, " ";q=0;w=1`,
		},
		{name: "empty set", ps: nil, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PolicyField(tt.ps)
			if err != nil || got != tt.want {
				t.Errorf("PolicyField() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestPolicyFieldErrors(t *testing.T) {
	tests := []struct {
		name string
		ps   []Policy
	}{
		{"empty name", []Policy{{Name: "", Quota: 1, Window: time.Second}}},
		{"non-ASCII name", []Policy{{Name: "café", Quota: 1, Window: time.Second}}},
		{"control in name", []Policy{{Name: "a\r\nSet-Cookie: x", Quota: 1, Window: time.Second}}},
		{"DEL in name", []Policy{{Name: "a\x7f", Quota: 1, Window: time.Second}}},
		{"negative quota", []Policy{{Name: "a", Quota: -1, Window: time.Second}}},
		{"quota too large", []Policy{{Name: "a", Quota: 1_000_000_000_000_000, Window: time.Second}}},
		{"negative window", []Policy{{Name: "a", Quota: 1, Window: -time.Second}}},
		{"unknown unit", []Policy{{Name: "a", Quota: 1, Window: time.Second, Unit: "bytes"}}},
		{"duplicate name", []Policy{{Name: "a", Quota: 1, Window: time.Second}, {Name: "a", Quota: 2, Window: time.Minute}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PolicyField(tt.ps)
			if !errors.Is(err, ErrInvalidPolicy) || got != "" {
				t.Errorf("PolicyField() = %q, %v; want ErrInvalidPolicy", got, err)
			}
		})
	}
}

func TestAppendLimitField(t *testing.T) {
	tests := []struct {
		name string
		ls   []Limit
		want string
	}{
		{
			name: "design example",
			ls: []Limit{
				{Name: "burst", Remaining: 42, Reset: 17 * time.Second},
				{Name: "daily", Remaining: 913, Reset: 80211 * time.Second},
			},
			want: `"burst";r=42;t=17, "daily";r=913;t=80211`,
		},
		{name: "t 999ms rounds up", ls: []Limit{{Name: "a", Remaining: 1, Reset: 999 * time.Millisecond}}, want: `"a";r=1;t=1`},
		{name: "t 1ns rounds up", ls: []Limit{{Name: "a", Remaining: 1, Reset: time.Nanosecond}}, want: `"a";r=1;t=1`},
		{name: "t 1s exact", ls: []Limit{{Name: "a", Remaining: 1, Reset: time.Second}}, want: `"a";r=1;t=1`},
		{name: "t 1001ms rounds up", ls: []Limit{{Name: "a", Remaining: 1, Reset: 1001 * time.Millisecond}}, want: `"a";r=1;t=2`},
		{name: "t zero", ls: []Limit{{Name: "a", Remaining: 1, Reset: 0}}, want: `"a";r=1;t=0`},
		{name: "t negative is zero", ls: []Limit{{Name: "a", Remaining: 1, Reset: -time.Second}}, want: `"a";r=1;t=0`},
		{name: "r clamped to zero", ls: []Limit{{Name: "a", Remaining: -5, Reset: time.Second}}, want: `"a";r=0;t=1`},
		{name: "r clamped to Integer range", ls: []Limit{{Name: "a", Remaining: 1 << 62, Reset: time.Second}}, want: `"a";r=999999999999999;t=1`},
		{name: "concurrency omits t", ls: []Limit{{Name: "inflight", Remaining: 3, Reset: 5 * time.Second, Concurrency: true}}, want: `"inflight";r=3`},
		{
			name: "pk base64",
			ls:   []Limit{{Name: "default", Remaining: 300000000, Reset: time.Minute, PartitionKey: []byte("App-999")}},
			want: `"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`,
		},
		{
			name: "pk of a hash prefix",
			ls:   []Limit{{Name: "burst", Remaining: 0, Reset: 2 * time.Second, PartitionKey: []byte{0xfb, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0xfe}}},
			want: `"burst";r=0;t=2;pk=:+/8AAQIDBP4=:`,
		},
		{
			name: "pk shared by neighbours, then another, then none, then the first again",
			ls: []Limit{
				{Name: "a", Remaining: 1, Concurrency: true, PartitionKey: []byte("key-0001")},
				{Name: "b", Remaining: 2, Concurrency: true, PartitionKey: []byte("key-0001")},
				{Name: "c", Remaining: 3, Concurrency: true, PartitionKey: []byte("key-0002")},
				{Name: "d", Remaining: 4, Concurrency: true},
				{Name: "e", Remaining: 5, Concurrency: true, PartitionKey: []byte("key-0002")},
				{Name: "f", Remaining: 6, Concurrency: true, PartitionKey: []byte("key-0001")},
			},
			want: `"a";r=1;pk=:a2V5LTAwMDE=:, "b";r=2;pk=:a2V5LTAwMDE=:, "c";r=3;pk=:a2V5LTAwMDI=:, "d";r=4, "e";r=5;pk=:a2V5LTAwMDI=:, "f";r=6;pk=:a2V5LTAwMDE=:`,
		},
		{name: "empty pk", ls: []Limit{{Name: "a", Remaining: 1, Concurrency: true, PartitionKey: []byte{}}}, want: `"a";r=1;pk=::`},
		{name: "escaping", ls: []Limit{{Name: `a"b\c`, Remaining: 1}}, want: `"a\"b\\c";r=1;t=0`},
		{name: "invalid bytes replaced", ls: []Limit{{Name: "a\r\nb\xffé", Remaining: 1}}, want: `"a??b???";r=1;t=0`},
		{name: "empty", ls: nil, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendLimitField(nil, tt.ls)); got != tt.want {
				t.Errorf("AppendLimitField() = %s; want %s", got, tt.want)
			}
			// Appends, leaving dst's content alone.
			if got := string(AppendLimitField([]byte("x"), tt.ls)); got != "x"+tt.want {
				t.Errorf("AppendLimitField(x) = %s; want x%s", got, tt.want)
			}
		})
	}
}

func TestAppendLimitFieldAllocs(t *testing.T) {
	ls := benchLimits()
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { dst = AppendLimitField(dst[:0], ls) }); n != 0 {
		t.Errorf("AppendLimitField allocates %v times per call, want 0", n)
	}
}
