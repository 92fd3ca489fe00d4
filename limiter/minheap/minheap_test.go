package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOrder: pushes and pops in random order pop the keys least first, as a sorted
// list of the same pushes would.
func TestOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h Heap[int64, int]
	var want []int64
	for i := range 5000 {
		if r.IntN(3) > 0 || h.Len() == 0 {
			k := r.Int64N(100) // repeats on purpose
			h.Push(k, i)
			want = append(want, k)
			continue
		}
		slices.Sort(want)
		if got := h.Pop().Key; got != want[0] {
			t.Fatalf("Pop = %d, want %d", got, want[0])
		}
		want = want[1:]
	}
	if h.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", h.Len(), len(want))
	}
}

// TestMovedAndFix: Moved tells every item where it is, so an item found through that
// index can be changed and fixed in place.
func TestMovedAndFix(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	h := Heap[int64, *int]{Moved: func(x *Item[int64, *int], i int) { *x.Value = i }}
	var pos []*int
	for range 300 {
		p := new(int)
		pos = append(pos, p)
		h.Push(r.Int64N(1000), p)
	}
	for range 1000 {
		p := pos[r.IntN(len(pos))]
		if h.Items[*p].Value != p {
			t.Fatalf("Moved lost an item: index %d holds another", *p)
		}
		h.Items[*p].Key = r.Int64N(1000)
		h.Fix(*p)
	}
	prev := int64(-1)
	for h.Len() > 0 {
		it := h.Pop()
		if it.Key < prev {
			t.Fatalf("after Fix, Pop gave %d after %d", it.Key, prev)
		}
		prev = it.Key
		for i := range h.Items {
			if *h.Items[i].Value != i {
				t.Fatalf("after Pop, item at %d thinks it is at %d", i, *h.Items[i].Value)
			}
		}
	}
}

func BenchmarkPushPop(b *testing.B) {
	var h Heap[int64, int32]
	for i := range 1024 {
		h.Push(int64(i*7919%1024), int32(i))
	}
	b.ReportAllocs()
	i := int64(0)
	for b.Loop() {
		h.Push(i*7919%1024, 0)
		h.Pop()
		i++
	}
}
