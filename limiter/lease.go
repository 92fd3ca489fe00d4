package limiter

import (
	"context"
	"sync/atomic"
	"time"
)

// Lease holds the concurrency units an allowed batch acquired until Release gives them
// back. A nil *Lease holds nothing. It is safe for concurrent use.
type Lease struct {
	store    Store
	reqs     []Request
	one      [1]Request // reqs' storage in the common case of one concurrency policy
	released atomic.Bool
}

// Acquire decides reqs like st.Decide and, if they are allowed, returns a Lease on the
// concurrency units they acquired (nil if none did). Release the lease when the work
// ends, typically with defer; releasing twice is harmless.
func Acquire(ctx context.Context, st Store, now time.Time, reqs []Request, out []Decision) (*Lease, []Decision, bool, error) {
	out, allowed, err := st.Decide(ctx, now, reqs, out)
	if !allowed || err != nil {
		return nil, out, allowed, err
	}
	var l *Lease
	for _, r := range reqs {
		if r.Policy.kind != kindConcurrency || r.Cost == 0 {
			continue
		}
		if l == nil {
			l = &Lease{store: st}
			l.reqs = l.one[:0]
		}
		l.reqs = append(l.reqs, r)
	}
	return l, out, true, nil
}

// Release gives the units back, once: later calls do nothing. The store bounds the
// call's duration itself.
func (l *Lease) Release() error {
	if l == nil || !l.released.CompareAndSwap(false, true) {
		return nil
	}
	return l.store.Release(context.Background(), l.reqs)
}
