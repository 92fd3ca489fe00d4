package limiter

import (
	"math/rand/v2"
	"testing"
)

// TestIndex checks the open-addressing index against a Go map on random additions and
// removals, with keys chosen to collide often.
func TestIndex(t *testing.T) {
	p := mustPolicy(t, Policy{Name: "p", Quota: 1, Window: 1})
	rng := rand.New(rand.NewPCG(3, 4))
	var x index
	var entries []entry
	want := map[Key]int32{}
	var free []int32
	for i := range 200_000 {
		k := keyN(uint64(rng.IntN(3000)))
		h := entryHash(fold(&k), p.id)
		pos, ok := x.find(h, p.id, &k, entries)
		wpos, wok := want[k]
		if ok != wok || (ok && pos != wpos) {
			t.Fatalf("op %d: find %v → %d %v, want %d %v", i, k, pos, ok, wpos, wok)
		}
		switch {
		case ok:
			x.remove(h, pos)
			delete(want, k)
			free = append(free, pos)
		default:
			if n := len(free); n > 0 {
				pos, free = free[n-1], free[:n-1]
			} else {
				pos = int32(len(entries))
				entries = append(entries, entry{})
			}
			entries[pos] = entry{policy: p, key: k}
			x.add(h, pos)
			want[k] = pos
		}
		if x.n != len(want) {
			t.Fatalf("op %d: %d entries, want %d", i, x.n, len(want))
		}
	}
	for k, wpos := range want {
		if pos, ok := x.find(entryHash(fold(&k), p.id), p.id, &k, entries); !ok || pos != wpos {
			t.Fatalf("%v: %d %v, want %d", k, pos, ok, wpos)
		}
	}
}
