package h3serve

import (
	"slices"
	"testing"
)

// TestGrowsStacksWhileServing: a request stream's goroutine grows its stack up
// front only while its connection has finished as many requests as it has open, so a
// connection that opens streams and never finishes them holds small goroutines.
func TestGrowsStacksWhileServing(t *testing.T) {
	h := &Server{}
	c := &h3Conn{}
	var grows []bool
	step := func(open, finish int) {
		for range open {
			ok, grow := c.start(h, nil)
			if !ok {
				t.Fatal("refused before shutdown")
			}
			grows = append(grows, grow)
		}
		for range finish {
			c.end(0)
		}
	}
	step(3, 0) // a new connection: nothing served yet
	step(0, 3)
	step(4, 0) // 3 served: the first 3 open at once grow, a fourth does not
	want := []bool{false, false, false, true, true, true, false}
	if !slices.Equal(grows, want) {
		t.Errorf("grow per stream %v, want %v", grows, want)
	}
	h.stopped.Store(true)
	if ok, _ := c.start(h, nil); ok {
		t.Error("a stream started after shutdown")
	}
	select {
	case <-c.waitIdle():
		t.Error("idle with a stream open")
	default:
	}
	for range 4 {
		c.end(0)
	}
	<-c.waitIdle()
}
