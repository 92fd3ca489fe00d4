package edge

import (
	"net/netip"
	"sync"
	"testing"
)

// The memo answers only for the input it was computed from: a connection whose
// address prefix or credential changes (a trusted proxy's connection carries many
// clients) gets each one's own key, never the previous one's.
func TestConnMemo(t *testing.T) {
	h := hasher{secret: []byte("memo-test-secret")}
	a, b := netip.MustParsePrefix("192.0.2.0/32"), netip.MustParsePrefix("198.51.100.7/32")
	m := new(connMemo)
	for _, p := range []netip.Prefix{a, a, b, a, b, b} {
		if got, want := m.ipKey(h, p), h.ipKey(p); got != want {
			t.Fatalf("ipKey(%v) = %x, want %x", p, got, want)
		}
	}
	for _, v := range []string{"k-1", "k-1", "k-2", "k-1", "", "k-2"} {
		if got, want := m.credKey(h, v), h.key('k', v); got != want {
			t.Fatalf("credKey(%q) = %x, want %x", v, got, want)
		}
	}
	if h.ipKey(a) == h.ipKey(b) || h.key('k', "k-1") == h.key('k', "k-2") {
		t.Fatal("distinct inputs hash alike: the checks above prove nothing")
	}
	// Without a memo (a request that did not come through a listener) it hashes.
	var none *connMemo
	if none.ipKey(h, a) != h.ipKey(a) || none.credKey(h, "k-1") != h.key('k', "k-1") {
		t.Fatal("nil memo does not hash")
	}
}

// Streams of one connection use its memo at once; run with -race.
func TestConnMemoConcurrent(t *testing.T) {
	h := hasher{secret: []byte("memo-test-secret")}
	m := new(connMemo)
	keys := []string{"k-1", "k-2", "k-3"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				v := keys[(g+i)%len(keys)]
				if m.credKey(h, v) != h.key('k', v) {
					t.Error("wrong key under concurrency")
					return
				}
			}
		})
	}
	wg.Wait()
}
