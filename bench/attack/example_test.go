package attack_test

import (
	"fmt"

	"github.com/h3edge/h3edge/bench/attack"
)

// The attacks, by the names h3bench attack takes.
func ExampleNames() {
	for _, name := range attack.Names() {
		fmt.Println(name)
	}
	// Output:
	// rapid-reset
	// made-you-reset
	// continuation
	// hpack-bomb
	// settings-flood
	// ping-flood
	// empty-frames
	// slowloris
	// slow-post
	// slow-read
	// quic-stall
	// quic-initial-flood
	// overload
}
