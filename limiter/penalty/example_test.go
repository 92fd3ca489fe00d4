package penalty_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/h3edge/h3edge/limiter/penalty"
)

// A source rejected more than Rejections times within Within is banned; OnBan is where
// the edge closes its connections and publishes the ban, and Banned is what the UDP
// socket asks for every datagram.
func ExampleBox() {
	box, _ := penalty.New(penalty.Config{
		Rejections: 2,
		Within:     10 * time.Second,
		Ban:        time.Minute,
		OnBan: func(b penalty.Ban) {
			fmt.Printf("ban %v (count %d): %s\n", b.Prefix, b.Count, b.Reason)
		},
	})
	now := time.Now() // instants given to the box are readings of the wall clock
	client := netip.MustParseAddr("2001:db8::7")
	for i := range 3 {
		fmt.Printf("429 #%d: banned=%v\n", i+1, box.Reject(client, now))
	}
	fmt.Println("neighbour in the /64 banned:", box.Banned(netip.MustParseAddr("2001:db8::8")))
	fmt.Println("other /64 banned:", box.Banned(netip.MustParseAddr("2001:db8:0:1::7")))

	// A ban made by another edge: recorded as shared, and not published again.
	changed, _ := box.Apply(penalty.Ban{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Until: now.Add(time.Hour), Reason: "edge-b"})
	fmt.Println("applied:", changed)
	for _, b := range box.List(now) {
		fmt.Printf("%v for %v shared=%v\n", b.Prefix, b.Until.Sub(now), b.Shared)
	}
	fmt.Println("lifted:", box.Lift(netip.MustParsePrefix("2001:db8::/64")), box.Banned(client))
	// Output:
	// 429 #1: banned=false
	// 429 #2: banned=false
	// ban 2001:db8::/64 (count 1): rejected 3 times within 10s
	// 429 #3: banned=true
	// neighbour in the /64 banned: true
	// other /64 banned: false
	// applied: true
	// 192.0.2.0/24 for 1h0m0s shared=true
	// 2001:db8::/64 for 1m0s shared=false
	// lifted: true false
}
