// Package minheap is a small binary min-heap over a slice, for the bounded tables of
// limiter, the penalty box and the edge's top-k sketch: container/heap without its
// interface boxing and its calls through an interface, so pushing and popping allocate
// nothing once the slice has room and compare keys inline.
//
// It is not under an internal/ directory because the edge (and its sub-packages) use
// it as well as limiter's.
package minheap

import "cmp"

// Item is one entry of a Heap: the Key it is ordered by and the Value it carries.
type Item[K cmp.Ordered, V any] struct {
	Key   K
	Value V
}

// Heap is a binary min-heap of items by key: Items[0] has the least key. The zero Heap
// is an empty heap ready to use. A Heap is not safe for concurrent use.
type Heap[K cmp.Ordered, V any] struct {
	// Items holds the heap in its order. Callers may read it, reslice it to empty, and
	// change the item at i in place if they call Fix(i) after.
	Items []Item[K, V]

	// Moved, if not nil, is called with each item the heap places at a new index i
	// (a pushed item included), so that an index of the items can follow them.
	Moved func(x *Item[K, V], i int)
}

// Len returns the number of items.
func (h *Heap[K, V]) Len() int { return len(h.Items) }

// Push adds value v with key k.
func (h *Heap[K, V]) Push(k K, v V) {
	h.Items = append(h.Items, Item[K, V]{k, v})
	i := len(h.Items) - 1
	if h.Moved != nil {
		h.Moved(&h.Items[i], i)
	}
	h.up(i)
}

// Pop removes and returns the item with the least key. The heap must not be empty.
func (h *Heap[K, V]) Pop() Item[K, V] {
	q := h.Items
	top := q[0]
	n := len(q) - 1
	if n > 0 {
		q[0] = q[n]
		if h.Moved != nil {
			h.Moved(&q[0], 0)
		}
	}
	q[n] = Item[K, V]{} // drop what the value refers to
	h.Items = q[:n]
	h.down(0)
	return top
}

// Fix restores the order after the item at i changed its key.
func (h *Heap[K, V]) Fix(i int) {
	if !h.up(i) {
		h.down(i)
	}
}

// up moves the item at i towards the root while its key is less than its parent's,
// and reports whether it moved.
func (h *Heap[K, V]) up(i int) bool {
	start := i
	q := h.Items
	for i > 0 {
		p := (i - 1) / 2
		if !(q[i].Key < q[p].Key) {
			break
		}
		h.swap(i, p)
		i = p
	}
	return i != start
}

// down moves the item at i towards the leaves while a child's key is less than its.
func (h *Heap[K, V]) down(i int) {
	q := h.Items
	n := len(q)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q[r].Key < q[l].Key {
			m = r
		}
		if !(q[m].Key < q[i].Key) {
			return
		}
		h.swap(i, m)
		i = m
	}
}

func (h *Heap[K, V]) swap(i, j int) {
	q := h.Items
	q[i], q[j] = q[j], q[i]
	if h.Moved != nil {
		h.Moved(&q[i], i)
		h.Moved(&q[j], j)
	}
}
