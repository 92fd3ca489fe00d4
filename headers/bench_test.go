package headers

import (
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

func benchLimits() []Limit {
	pk := []byte{0x9f, 0x86, 0xd0, 0x81, 0x88, 0x4c, 0x7d, 0x65}
	return []Limit{
		{Name: "burst", Remaining: 42, Reset: 16*time.Second + 300*time.Millisecond, PartitionKey: pk},
		{Name: "daily", Remaining: 913, Reset: 80211 * time.Second, PartitionKey: pk},
		{Name: "inflight", Remaining: 7, Concurrency: true, PartitionKey: pk},
	}
}

func benchPolicies() []Policy {
	return []Policy{
		{Name: "burst", Quota: 100, Window: time.Minute},
		{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
		{Name: "inflight", Quota: 10, Unit: UnitConcurrentRequests},
	}
}

// BenchmarkAppendLimitField is the per-response cost: three policies, dst reused.
func BenchmarkAppendLimitField(b *testing.B) {
	ls := benchLimits()
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendLimitField(dst[:0], ls)
	}
}

func BenchmarkAppendLimitFieldParallel(b *testing.B) {
	ls := benchLimits()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]byte, 0, 256)
		for pb.Next() {
			dst = AppendLimitField(dst[:0], ls)
		}
	})
}

func BenchmarkPolicyField(b *testing.B) {
	ps := benchPolicies()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PolicyField(ps); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHttpsfvMarshal builds the same RateLimit value as BenchmarkAppendLimitField
// through httpsfv, for comparison.
func BenchmarkHttpsfvMarshal(b *testing.B) {
	ls := benchLimits()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := httpsfv.Marshal(refLimitList(ls)); err != nil {
			b.Fatal(err)
		}
	}
}
