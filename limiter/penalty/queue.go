package penalty

// banQueue is a binary min-heap of items by at.
type banQueue []banItem

func (q *banQueue) push(it banItem) {
	h := append(*q, it)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent].at <= h[i].at {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	*q = h
}

func (q *banQueue) pop() banItem {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < n && h[l].at < h[small].at {
			small = l
		}
		if r < n && h[r].at < h[small].at {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	*q = h
	return top
}
