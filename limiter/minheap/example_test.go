package minheap_test

import (
	"fmt"

	"github.com/h3edge/h3edge/limiter/minheap"
)

// Deadlines by instant: the heap pops the soonest first.
func Example() {
	var h minheap.Heap[int64, string]
	h.Push(30, "ban ends")
	h.Push(10, "entry fresh")
	h.Push(20, "lease expires")
	for h.Len() > 0 {
		fmt.Println(h.Pop().Value)
	}
	// Output:
	// entry fresh
	// lease expires
	// ban ends
}
