package bench

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// TestH3ClientWaiterAfterRetire: a request that waited for another worker's dial must
// not be handed a nil connection when that dial succeeded but its connection was
// retired before the waiter looked (a CI run crashed h3bench on exactly that: a nil
// *http3.ClientConn). It must dial again; here that dial waits on a gate closed for an
// hour until the context ends, so every call must end with an error.
func TestH3ClientWaiterAfterRetire(t *testing.T) {
	type result struct {
		cc  *http3.ClientConn
		err error
	}
	for range 50 {
		c := &h3Client{}
		c.gate.next = time.Now().Add(time.Hour)
		ch := make(chan struct{})
		c.dialing = ch
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan result, 1)
		go func() {
			_, cc, err := c.conn(ctx)
			res <- result{cc, err}
		}()
		waitInSelect(t, "(*h3Client).conn")
		// The other worker's dial ends well, and its connection is retired at once.
		c.mu.Lock()
		c.dialing, c.dialErr, c.qc, c.cc = nil, nil, nil, nil
		close(ch)
		c.mu.Unlock()
		cancel()
		r := <-res
		if r.err == nil && r.cc == nil {
			t.Fatal("conn returned neither a connection nor an error")
		}
	}
}

// waitInSelect polls, with a deadline, until a goroutine blocked in a select has fn
// on its stack.
func waitInSelect(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[select]") && strings.Contains(g, fn) {
				return
			}
		}
	}
	t.Fatalf("no goroutine waits in a select in %s", fn)
}
