package overload_test

import (
	"fmt"

	"github.com/h3edge/h3edge/edge/overload"
)

// A Sampler's verdict is one atomic load, asked per connection and per request; Run
// (on a goroutine of its own) keeps it current.
func ExampleSampler() {
	s := overload.New(overload.Config{MaxGoroutines: 1 << 20, Memory: true})
	done := make(chan struct{})
	defer close(done)
	go s.Run(done)
	fmt.Println(s.Shedding())
	// Output: false
}
