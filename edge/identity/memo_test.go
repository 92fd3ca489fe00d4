package identity

import (
	"net/netip"
	"sync"
	"testing"
)

// The memo answers only for the input it was computed from: a connection whose
// address prefix or credential changes (a trusted proxy's connection carries many
// clients) gets each one's own key, never the previous one's.
func TestMemo(t *testing.T) {
	h := NewHasher([]byte("memo-test-secret"))
	a, b := netip.MustParsePrefix("192.0.2.0/32"), netip.MustParsePrefix("198.51.100.7/32")
	m := new(Memo)
	for _, p := range []netip.Prefix{a, a, b, a, b, b} {
		if got, want := m.Prefix(h, p), h.Prefix(p); got != want {
			t.Fatalf("ipKey(%v) = %x, want %x", p, got, want)
		}
	}
	for _, v := range []string{"k-1", "k-1", "k-2", "k-1", "", "k-2"} {
		if got, want := m.Credential(h, v), h.Credential(v); got != want {
			t.Fatalf("credKey(%q) = %x, want %x", v, got, want)
		}
	}
	if h.Prefix(a) == h.Prefix(b) || h.Credential("k-1") == h.Credential("k-2") {
		t.Fatal("distinct inputs hash alike: the checks above prove nothing")
	}
	// Without a memo (a request that did not come through a listener) it hashes.
	var none *Memo
	if none.Prefix(h, a) != h.Prefix(a) || none.Credential(h, "k-1") != h.Credential("k-1") {
		t.Fatal("nil memo does not hash")
	}
}

// Streams of one connection use its memo at once; run with -race.
func TestMemoConcurrent(t *testing.T) {
	h := NewHasher([]byte("memo-test-secret"))
	m := new(Memo)
	keys := []string{"k-1", "k-2", "k-3"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				v := keys[(g+i)%len(keys)]
				if m.Credential(h, v) != h.Credential(v) {
					t.Error("wrong key under concurrency")
					return
				}
			}
		})
	}
	wg.Wait()
}
