package quicpkt_test

import (
	"fmt"

	"github.com/h3edge/h3edge/bench/quicpkt"
)

// An Initial carrying a token of the caller's choice, padded to the size every client
// Initial must have.
func ExampleInitial_Append() {
	in := quicpkt.Initial{
		DCID:   []byte{1, 2, 3, 4, 5, 6, 7, 8},
		SCID:   []byte{9},
		Token:  []byte("forged"),
		Crypto: []byte{1, 0, 0, 0}, // a ClientHello's first bytes; quicpkt.ClientHello makes a real one
	}
	pkt := in.Append(nil)
	fmt.Println(len(pkt), pkt[0]&0xf0 == 0xc0, quicpkt.IsRetry(pkt))
	// Output: 1200 true false
}
