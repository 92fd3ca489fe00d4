package limiter

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/h3edge/h3edge/limiter/minheap"
)

// Config sizes a Local store.
type Config struct {
	// MaxEntries bounds the (policy, key) entries held; each takes about 120 bytes
	// (plus 8 bytes per logged unit for sliding_log). If zero, 1,000,000 is used.
	MaxEntries int
	// Shards is the number of independently locked parts of the table, rounded up to a
	// power of two; MaxEntries is split evenly between them. If zero, 64 is used.
	Shards int
}

// Local is a Store that keeps state in memory, for one edge. It is safe for concurrent
// use.
//
// Its table holds at most MaxEntries entries. A full part of the table makes room by
// dropping the entry that carries the least information: first any entry whose state
// is already equivalent to a fresh one (full bucket, expired window, empty log), else
// the one that would become fresh soonest. Forgetting that entry hands its key the
// least unearned quota (for a token bucket, exactly the tokens still missing), so a
// flood of new keys evicts other new keys before it evicts a key that is over its
// limit. Entries holding concurrency units are never evicted. Once a part of the table
// is half full, entries that have become fresh are also swept, a few whenever a key is
// added, never all at once. Local runs no goroutine and reads no clock: sweeping and
// eviction happen while a key is added, at the instant being decided.
type Local struct {
	shards []shard
	shift  uint // a key's shard is the top bits of its hash
}

// NewLocal returns an empty Local store.
func NewLocal(cfg Config) (*Local, error) {
	if cfg.MaxEntries < 0 || cfg.Shards < 0 {
		return nil, fmt.Errorf("limiter: MaxEntries and Shards must not be negative")
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 1_000_000
	}
	if cfg.Shards == 0 {
		cfg.Shards = 64
	}
	n := 1 << bits.Len(uint(cfg.Shards-1))
	n = min(n, 1<<bits.Len(uint(cfg.MaxEntries))>>1) // no shard without room
	s := &Local{shards: make([]shard, n), shift: uint(64 - bits.Len(uint(n-1)))}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.max = cfg.MaxEntries / n
		if i < cfg.MaxEntries%n {
			sh.max++
		}
	}
	return s, nil
}

// entry is one key's state under one policy.
type entry struct {
	state  state
	policy *Policy
	key    Key
	log    []int64 // sliding_log: admitted instants, a ring of power-of-two size
}

// shard is one independently locked part of the table.
type shard struct {
	mu      sync.Mutex
	index   index // (policy, key) → position in entries
	entries []entry
	free    []int32 // unused positions in entries
	// queue orders entries by when they become fresh, lazily: each entry that can
	// become fresh has exactly one item, whose time is at most the entry's. Charging
	// only moves an entry's time later, so charging never touches the queue; the item
	// is corrected when it reaches the front. Concurrency entries are not queued.
	// Keys are instants (ns, at most the entry's freshAt), values positions in entries.
	queue minheap.Heap[int64, int32]
	max   int
	_     [64]byte // keep neighbouring shards' locks off one cache line
}

// pending is one request's progress through a batch.
type pending struct {
	hash  uint64 // entryHash of the request's policy and key
	shard uint32
	slot  int32 // position in the shard's entries; -1 if the key has no entry yet
	next  state // the state to store if the batch is admitted
	added bool  // the entry was added by this batch
}

// batchInline is the batch size decided without allocating.
const batchInline = 8

// Decide implements Store: it decides reqs at instant now, all-or-nothing, appending
// one Decision per request to out. It does not allocate when out has room and the
// batch has at most 8 requests, except to grow the table for a key seen the first
// time (and a sliding_log's ring as it fills).
func (s *Local) Decide(_ context.Context, now time.Time, reqs []Request, out []Decision) ([]Decision, bool, error) {
	return s.decide(now.UnixNano(), reqs, out)
}

// DecideNow is Decide at time.Now(), for callers without an instant at hand.
func (s *Local) DecideNow(reqs []Request, out []Decision) ([]Decision, bool, error) {
	return s.decide(time.Now().UnixNano(), reqs, out)
}

func (s *Local) decide(now int64, reqs []Request, out []Decision) ([]Decision, bool, error) {
	if len(reqs) == 1 {
		return s.decideOne(now, &reqs[0], out)
	}
	var inline [batchInline]pending
	ps := inline[:0]
	if len(reqs) > batchInline {
		ps = make([]pending, 0, len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		if r.Policy == nil || r.Policy.kind == kindInvalid || r.Cost < 0 {
			return out, false, fmt.Errorf("%w: request %d", ErrInvalidRequest, i)
		}
		// Filled in place: appending a pending literal built it on the stack and copied
		// it with 16-byte loads right after its narrower stores, and those loads stalled
		// (store forwarding): 12–27 ns of a three-policy decision in BenchmarkDecide3.
		f := fold(&r.Key)
		ps = ps[:len(ps)+1] // zeroed: the inline array or make's
		pd := &ps[len(ps)-1]
		pd.hash, pd.shard, pd.slot = entryHash(f, r.Policy.id), uint32(keyHash(f)>>s.shift), -1
	}
	s.lock(ps)
	first := len(out)
	out, allowed, err := s.decideLocked(now, reqs, ps, out)
	s.unlock(ps)
	if err == nil {
		for i := range reqs {
			reqs[i].Policy.count(ps[i].hash, allowed, out[first+i].Allowed)
		}
	}
	return out, allowed, err
}

// decideOne is decide for a batch of one, the common case, without the batch's
// bookkeeping: the same steps on one shard.
func (s *Local) decideOne(now int64, r *Request, out []Decision) ([]Decision, bool, error) {
	p := r.Policy
	if p == nil || p.kind == kindInvalid || r.Cost < 0 {
		return out, false, fmt.Errorf("%w: request 0", ErrInvalidRequest)
	}
	f := fold(&r.Key)
	h := entryHash(f, p.id)
	sh := &s.shards[keyHash(f)>>s.shift]
	out = append(out, Decision{})
	d := &out[len(out)-1]
	sh.mu.Lock()
	slot, found := sh.index.find(h, p.id, &r.Key, sh.entries)
	var next state
	var ring []int64
	if found {
		next, ring = sh.entries[slot].state, sh.entries[slot].log
	}
	p.step(&next, ring, now, r.Cost, d)
	if d.Allowed && r.Cost > 0 {
		added := !found
		if added {
			var ok bool
			if slot, ok = sh.add(p, r.Key, h, now, s, nil); !ok {
				sh.mu.Unlock()
				return out, false, ErrFull
			}
		}
		e := &sh.entries[slot]
		if p.kind == kindLog {
			p.logAppend(e, now, r.Cost)
		} else {
			e.state = next
		}
		if added && p.kind != kindConcurrency {
			sh.queue.Push(p.freshAt(e), slot)
		}
	}
	sh.mu.Unlock()
	p.count(h, d.Allowed, d.Allowed)
	return out, d.Allowed, nil
}

// decideLocked decides a batch whose shards are locked. First every request is decided
// on a copy of its state; only if all are allowed are the new states stored.
func (s *Local) decideLocked(now int64, reqs []Request, ps []pending, out []Decision) ([]Decision, bool, error) {
	first := len(out)
	allowed := true
	for i := range reqs {
		r, pd := &reqs[i], &ps[i]
		sh := &s.shards[pd.shard]
		var base state
		if j := sameEntry(reqs, ps, i); j >= 0 { // charged again in this batch: start from there
			pd.slot, base = ps[j].slot, ps[j].next
		} else if slot, ok := sh.index.find(pd.hash, r.Policy.id, &r.Key, sh.entries); ok {
			pd.slot, base = slot, sh.entries[slot].state
		}
		var ring []int64
		if pd.slot >= 0 {
			ring = sh.entries[pd.slot].log
		}
		out = append(out, Decision{})
		d := &out[len(out)-1]
		pd.next = base
		r.Policy.step(&pd.next, ring, now, r.Cost, d)
		allowed = allowed && d.Allowed
	}
	if !allowed {
		// Nothing is charged; the requests this batch's verdict overrode report their
		// state as it stays.
		for i := range reqs {
			if d := &out[first+i]; d.Allowed && reqs[i].Cost > 0 {
				s.read(now, &reqs[i], &ps[i], d)
			}
		}
		return out, false, nil
	}
	// Make room for new keys before storing anything, so that a full table cannot leave
	// the batch half charged.
	for i := range reqs {
		r, pd := &reqs[i], &ps[i]
		if pd.slot >= 0 || r.Cost == 0 {
			continue
		}
		sh := &s.shards[pd.shard]
		if slot, ok := sh.index.find(pd.hash, r.Policy.id, &r.Key, sh.entries); ok { // added just now
			pd.slot = slot
			continue
		}
		slot, ok := sh.add(r.Policy, r.Key, pd.hash, now, s, ps)
		if !ok {
			s.dropAdded(ps)
			return out, false, ErrFull
		}
		pd.slot, pd.added = slot, true
	}
	for i := range reqs {
		r, pd := &reqs[i], &ps[i]
		if r.Cost == 0 {
			continue
		}
		e := &s.shards[pd.shard].entries[pd.slot]
		if r.Policy.kind == kindLog {
			r.Policy.logAppend(e, now, r.Cost)
		} else {
			e.state = pd.next
		}
	}
	for i := range ps {
		if pd := &ps[i]; pd.added && reqs[i].Policy.kind != kindConcurrency {
			sh := &s.shards[pd.shard]
			sh.queue.Push(reqs[i].Policy.freshAt(&sh.entries[pd.slot]), pd.slot)
		}
	}
	return out, true, nil
}

// read decides a request as a read, from the state stored for it, which the batch
// found at pd.slot.
func (s *Local) read(now int64, r *Request, pd *pending, d *Decision) {
	var base state
	var ring []int64
	if pd.slot >= 0 {
		e := &s.shards[pd.shard].entries[pd.slot]
		base, ring = e.state, e.log
	}
	r.Policy.step(&base, ring, now, 0, d)
}

// dropAdded removes the entries a failed batch added; they hold no state yet.
func (s *Local) dropAdded(ps []pending) {
	for i := range ps {
		if pd := &ps[i]; pd.added {
			s.shards[pd.shard].remove(pd.slot)
			pd.added, pd.slot = false, -1
		}
	}
}

// sameEntry returns the index of an earlier request in reqs for the same entry as
// reqs[i], or -1.
func sameEntry(reqs []Request, ps []pending, i int) int {
	for j := range i {
		if ps[j].hash == ps[i].hash && reqs[j].Policy.id == reqs[i].Policy.id && reqs[j].Key == reqs[i].Key {
			return j
		}
	}
	return -1
}

// lock locks the batch's shards in increasing order, each once, so that batches
// spanning the same shards cannot deadlock.
func (s *Local) lock(ps []pending) {
	if len(ps) == 1 {
		s.shards[ps[0].shard].mu.Lock()
		return
	}
	for last := -1; ; {
		next := len(s.shards)
		for i := range ps {
			if sh := int(ps[i].shard); sh > last && sh < next {
				next = sh
			}
		}
		if next == len(s.shards) {
			return
		}
		s.shards[next].mu.Lock()
		last = next
	}
}

// unlock unlocks what lock locked.
func (s *Local) unlock(ps []pending) {
	if len(ps) == 1 {
		s.shards[ps[0].shard].mu.Unlock()
		return
	}
	for i := range ps {
		if sameShard(ps, i) < 0 {
			s.shards[ps[i].shard].mu.Unlock()
		}
	}
}

// sameShard returns the index of an earlier request in ps on the same shard as ps[i],
// or -1.
func sameShard(ps []pending, i int) int {
	for j := range i {
		if ps[j].shard == ps[i].shard {
			return j
		}
	}
	return -1
}

// Release implements Store: it gives back the units of the concurrency requests in
// reqs. An entry left holding nothing is removed at once.
func (s *Local) Release(_ context.Context, reqs []Request) error {
	for i := range reqs {
		r := &reqs[i]
		if r.Policy == nil || r.Policy.kind != kindConcurrency || r.Cost <= 0 {
			continue
		}
		f := fold(&r.Key)
		sh := &s.shards[keyHash(f)>>s.shift]
		sh.mu.Lock()
		if slot, ok := sh.index.find(entryHash(f, r.Policy.id), r.Policy.id, &r.Key, sh.entries); ok {
			e := &sh.entries[slot]
			if e.state.n -= r.Cost; e.state.n <= 0 {
				sh.remove(slot)
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

// Take decides a single request without allocating; see the package-level Take.
func (s *Local) Take(now time.Time, req Request) (Decision, error) {
	var buf [1]Decision
	out, _, err := s.decide(now.UnixNano(), []Request{req}, buf[:0])
	if len(out) == 0 {
		return Decision{Policy: req.Policy}, err
	}
	return out[0], err
}

// Len returns the number of entries held.
func (s *Local) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.index.n
		sh.mu.Unlock()
	}
	return n
}

// add stores a new entry with a fresh state and returns its position. Once the shard
// is half full it first sweeps a few entries gone fresh, and if it is full it evicts
// one; entries of the batch being decided (ps) are kept. It reports false if nothing
// could be evicted. (Below half full, fresh entries stay: a client that comes back
// reuses its entry instead of paying to remove and add it again.)
func (sh *shard) add(p *Policy, k Key, h uint64, now int64, s *Local, ps []pending) (int32, bool) {
	mine := func(slot int32) bool {
		for i := range ps {
			if ps[i].slot == slot && &s.shards[ps[i].shard] == sh {
				return true
			}
		}
		return false
	}
	if 2*sh.index.n >= sh.max {
		sh.sweep(now, mine)
	}
	if sh.index.n >= sh.max && !sh.evict(now, mine) {
		return -1, false
	}
	var slot int32
	if n := len(sh.free); n > 0 {
		slot = sh.free[n-1]
		sh.free = sh.free[:n-1]
	} else {
		slot = int32(len(sh.entries))
		sh.entries = append(sh.entries, entry{})
	}
	sh.entries[slot] = entry{policy: p, key: k}
	sh.index.add(h, slot)
	return slot, true
}

// sweepBatch is how many due queue items an addition examines.
const sweepBatch = 2

// sweep removes up to sweepBatch entries that have become fresh by now, and corrects
// the time of items that were due but are not.
func (sh *shard) sweep(now int64, keep func(int32) bool) {
	for range sweepBatch {
		if sh.queue.Len() == 0 || sh.queue.Items[0].Key > now || keep(sh.queue.Items[0].Value) {
			return
		}
		it := sh.queue.Pop()
		e := &sh.entries[it.Value]
		if at := e.policy.freshAt(e); at > now {
			sh.queue.Push(at, it.Value)
		} else {
			sh.remove(it.Value)
		}
	}
}

// evictTries bounds how many stale queue items one eviction corrects before it settles
// for the front item as it is.
const evictTries = 64

// evict removes the entry that becomes fresh soonest (if one is fresh already, that
// one), other than those keep protects. It reports false if there is none.
func (sh *shard) evict(now int64, keep func(int32) bool) bool {
	var keptInline [batchInline]minheap.Item[int64, int32]
	kept := keptInline[:0]
	defer func() {
		for _, it := range kept {
			sh.queue.Push(it.Key, it.Value)
		}
	}()
	for tries := 0; sh.queue.Len() > 0; tries++ {
		it := sh.queue.Pop()
		if keep(it.Value) {
			kept = append(kept, it)
			continue
		}
		e := &sh.entries[it.Value]
		// The front item's time is a lower bound; if the entry's own time is later,
		// requeue it and look again, since another entry may now be sooner.
		if at := e.policy.freshAt(e); at > it.Key && at > now && tries < evictTries {
			sh.queue.Push(at, it.Value)
			continue
		}
		sh.remove(it.Value)
		return true
	}
	return false
}

// remove deletes the entry at slot; its queue item, if any, must be gone already.
func (sh *shard) remove(slot int32) {
	e := &sh.entries[slot]
	sh.index.remove(entryHash(fold(&e.key), e.policy.id), slot)
	*e = entry{}
	sh.free = append(sh.free, slot)
}
