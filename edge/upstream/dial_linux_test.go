package upstream

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// blackhole returns a loopback address whose connects hang: a listener that never
// accepts, with its backlog full.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	for range 8 { // fill the backlog
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Skip("the backlog did not fill: connects to it do not hang here")
	}
	return "http://" + addr
}

// A POST whose first target's connect timed out (within the try's timeout, below the
// dial's own) never reached it, and is retried on the next target.
func TestConnectTimeoutRetriedWhateverTheMethod(t *testing.T) {
	good := startOrigin(t, "good", nil)
	url := front(t, newPool(t, Config{Retries: 1, Timeout: 500 * time.Millisecond,
		Targets: []Target{tgt(t, blackhole(t), 1), tgt(t, good.URL, 1)}}))
	for range 2 {
		if o, code := get(t, http.DefaultClient, mustReq(t, "POST", url+"/order", strings.NewReader(`{"qty":1}`))); code != 200 || o != "good" {
			t.Fatalf("POST: %d from %q, want 200 from good: the first target was never connected", code, o)
		}
	}
}
