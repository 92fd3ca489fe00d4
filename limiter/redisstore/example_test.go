package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/h3edge/h3edge/limiter"
	"github.com/h3edge/h3edge/limiter/redisstore"
)

// A Store decides like limiter.Local, with the state in Redis. (No Output: it needs a
// Redis; the package's tests run it against real redis-server processes.)
func Example() {
	st, err := redisstore.New(redisstore.Config{
		URL:           "redis://127.0.0.1:6379/0",
		Timeout:       10 * time.Millisecond,
		NegativeCache: true,
	})
	if err != nil {
		log.Fatal(err) // a configuration error; an unreachable Redis is not one
	}
	defer st.Close()

	burst, _ := limiter.NewPolicy(limiter.Policy{Name: "burst", Quota: 100, Window: time.Minute})
	var key limiter.Key // the keyed hash of the client's API key, never the key itself
	out, allowed, err := st.Decide(context.Background(), time.Now(),
		[]limiter.Request{{Policy: burst, Key: key, Cost: 1}}, nil)
	switch {
	case errors.Is(err, redisstore.ErrUnavailable):
		fmt.Println("store unavailable: apply on_store_failure")
	case !allowed:
		fmt.Println("429, retry after", out[0].RetryAfter)
	default:
		fmt.Println("allowed,", out[0].Remaining, "left")
	}
}

// How an edge applies on_store_failure when Decide fails with ErrUnavailable: open
// admits within a local backstop with the same policies, closed answers 503, local
// decides against quota ÷ FleetSize on this edge alone.
func Example_storeFailure() {
	st, err := redisstore.New(redisstore.Config{URL: "redis://127.0.0.1:6379/0"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	backstop, _ := limiter.NewLocal(limiter.Config{}) // open: same policies, per edge
	share, _ := limiter.NewLocal(limiter.Config{})    // local: quota ÷ fleet

	burst, _ := limiter.NewPolicy(limiter.Policy{Name: "burst", Quota: 100, Window: time.Minute})
	// The edge keeps one divided policy per fleet size it has seen (a new *Policy
	// with other parameters has other state).
	divided, _ := limiter.NewPolicy(limiter.Policy{Name: "burst", Quota: max(burst.Quota/int64(st.FleetSize()), 1), Window: time.Minute})

	var key limiter.Key
	now := time.Now()
	reqs := []limiter.Request{{Policy: burst, Key: key, Cost: 1}}
	_, allowed, err := st.Decide(context.Background(), now, reqs, nil)
	if errors.Is(err, redisstore.ErrUnavailable) {
		onStoreFailure := "open" // the policy's setting
		switch onStoreFailure {
		case "open":
			_, allowed, _ = backstop.Decide(context.Background(), now, reqs, nil)
		case "closed":
			allowed = false // 503 with Retry-After and …#temporary-reduced-capacity
		case "local":
			_, allowed, _ = share.Decide(context.Background(), now,
				[]limiter.Request{{Policy: divided, Key: key, Cost: 1}}, nil)
		}
	}
	fmt.Println(allowed, st.Breaker())
}

// Blobs keeps a few named values and a lock that a fleet shares: one edge takes the
// lock for a lease, does the work once, stores the result for the others and lets
// go. (No Output: it needs a Redis.)
func ExampleStore_Blobs() {
	st, err := redisstore.New(redisstore.Config{URL: "redis://127.0.0.1:6379/0"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	b := st.Blobs("h3edge:acme:")
	ctx := context.Background()
	token, ok, err := b.TryLock(ctx, "issue_cert_api.example.com", 30*time.Second)
	if err != nil || !ok {
		fmt.Println("another edge holds the lock, or Redis cannot be reached:", err)
		return
	}
	// Extend the lease while the work takes longer; release it when done.
	defer b.Unlock(ctx, "issue_cert_api.example.com", token)
	if err := b.Put(ctx, "certificates/api.example.com.crt", []byte("-----BEGIN CERTIFICATE-----…")); err != nil {
		fmt.Println(err)
	}
	names, _ := b.List(ctx, "certificates/")
	fmt.Println(names)
}
