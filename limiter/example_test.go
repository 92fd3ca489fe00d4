package limiter_test

import (
	"context"
	"fmt"
	"time"

	"net/netip"

	"github.com/h3edge/h3edge/limiter"
)

// A request matching two policies is decided once, all-or-nothing: the third request is
// denied by "daily", and "burst" is not charged for it.
func ExampleLocal_Decide() {
	burst, _ := limiter.NewPolicy(limiter.Policy{Name: "burst", Quota: 100, Window: time.Minute})
	daily, _ := limiter.NewPolicy(limiter.Policy{Name: "daily", Algorithm: limiter.FixedWindow, Quota: 2, Window: 24 * time.Hour})
	store, _ := limiter.NewLocal(limiter.Config{MaxEntries: 100_000})

	client := limiter.Key{0x2a} // the hash of the client's API key
	reqs := []limiter.Request{
		{Policy: burst, Key: client, Cost: 1},
		{Policy: daily, Key: client, Cost: 1},
	}
	now := time.Date(2026, 5, 23, 12, 0, 0, 0, time.UTC)
	out := make([]limiter.Decision, 0, len(reqs))
	for range 3 {
		var allowed bool
		out, allowed, _ = store.Decide(context.Background(), now, reqs, out[:0])
		fmt.Printf("allowed=%v", allowed)
		for _, d := range out {
			fmt.Printf("  %s: ok=%v r=%d t=%v retry=%v", d.Policy, d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter)
		}
		fmt.Println()
	}
	// Output:
	// allowed=true  burst: ok=true r=99 t=600ms retry=0s  daily: ok=true r=1 t=12h0m0s retry=0s
	// allowed=true  burst: ok=true r=98 t=600ms retry=0s  daily: ok=true r=0 t=12h0m0s retry=0s
	// allowed=false  burst: ok=true r=98 t=600ms retry=0s  daily: ok=false r=0 t=12h0m0s retry=12h0m0s
}

// A shadow policy is decided behind the enforced ones, into the same out slice, so its
// verdict is reported and counted but blocks nothing.
func ExampleLocal_Decide_shadow() {
	enforced, _ := limiter.NewPolicy(limiter.Policy{Name: "burst", Quota: 100, Window: time.Minute})
	shadow, _ := limiter.NewPolicy(limiter.Policy{Name: "trial", Quota: 1, Window: time.Minute})
	store, _ := limiter.NewLocal(limiter.Config{})
	now := time.Date(2026, 5, 23, 12, 0, 0, 0, time.UTC)

	out := make([]limiter.Decision, 0, 2)
	for range 2 {
		out, allowed, _ := store.Decide(context.Background(), now, []limiter.Request{{Policy: enforced, Cost: 1}}, out[:0])
		out, _, _ = store.Decide(context.Background(), now, []limiter.Request{{Policy: shadow, Cost: 1}}, out)
		fmt.Printf("allowed=%v burst=%v trial=%v\n", allowed, out[0].Allowed, out[1].Allowed)
	}
	fmt.Printf("%+v\n", shadow.Stats())
	// Output:
	// allowed=true burst=true trial=true
	// allowed=true burst=true trial=false
	// {Allowed:1 Denied:1 Vetoed:0}
}

// Concurrency units are held by a Lease until the response ends.
func ExampleAcquire() {
	inflight, _ := limiter.NewPolicy(limiter.Policy{Name: "inflight", Algorithm: limiter.Concurrency, Quota: 1})
	store, _ := limiter.NewLocal(limiter.Config{})
	reqs := []limiter.Request{{Policy: inflight, Key: limiter.Key{1}, Cost: 1}}
	now := time.Date(2026, 5, 23, 12, 0, 0, 0, time.UTC)

	lease, _, ok, _ := limiter.Acquire(context.Background(), store, now, reqs, nil)
	fmt.Println("first:", ok)
	_, _, ok, _ = limiter.Acquire(context.Background(), store, now, reqs, nil)
	fmt.Println("second, while the first runs:", ok)
	lease.Release()
	lease.Release() // harmless
	_, _, ok, _ = limiter.Acquire(context.Background(), store, now, reqs, nil)
	fmt.Println("third, after the release:", ok)
	// Output:
	// first: true
	// second, while the first runs: false
	// third, after the release: true
}

// A body without Content-Length is charged chunk by chunk as it streams.
func ExampleTake() {
	bytes, _ := limiter.NewPolicy(limiter.Policy{Name: "upload", Algorithm: limiter.SlidingWindow, Quota: 10_000, Window: time.Minute})
	store, _ := limiter.NewLocal(limiter.Config{})
	now := time.Date(2026, 5, 23, 12, 0, 0, 0, time.UTC)

	for _, chunk := range []int64{4096, 4096, 4096} {
		d, _ := limiter.Take(context.Background(), store, now, limiter.Request{Policy: bytes, Key: limiter.Key{1}, Cost: chunk})
		if !d.Allowed {
			fmt.Printf("chunk of %d refused: %d bytes left\n", chunk, d.Remaining)
			break
		}
		fmt.Printf("chunk of %d read: %d bytes left\n", chunk, d.Remaining)
	}
	// Output:
	// chunk of 4096 read: 5904 bytes left
	// chunk of 4096 read: 1808 bytes left
	// chunk of 4096 refused: 1808 bytes left
}

func ExampleNewPolicy() {
	_, err := limiter.NewPolicy(limiter.Policy{Name: "burst", Algorithm: limiter.GCRA, Quota: 10, Window: time.Second, Burst: 20})
	fmt.Println(err)
	p, _ := limiter.NewPolicy(limiter.Policy{Name: "burst", Algorithm: limiter.GCRA, Quota: 10, Window: time.Second})
	fmt.Println(p.Burst)
	// Output:
	// limiter: invalid policy "burst": burst must be between 0 and quota
	// 10
}

// A SourcePrefix cuts client addresses into the sources that budgets and bans count.
func ExampleSourcePrefix() {
	sp := limiter.SourcePrefix{IPv4: 24, IPv6: 64}
	for _, a := range []string{"192.0.2.77", "::ffff:192.0.2.9", "2001:db8::1"} {
		fmt.Println(sp.Prefix(netip.MustParseAddr(a)))
	}
	// Output:
	// 192.0.2.0/24
	// 192.0.2.0/24
	// 2001:db8::/64
}
