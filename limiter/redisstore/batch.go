package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// batcher sends concurrent decisions together. A decision arriving while a flush slot
// is free goes at once (after MaxDelay, if set, when another flush is in flight);
// while every slot is busy, decisions queue, and the queue is flushed when a slot
// frees or when it holds MaxSize decisions, with at most MaxInFlight flushes at
// once. A flush is one script call per slot (one pipeline on a cluster),
// however many decisions it carries; each decision stays all-or-nothing on its own.
//
// Flushes run on the goroutines of the deciding callers, not on a goroutine of the
// batcher's: the caller that finds a free slot flushes, and a queued batch is handed
// to one of its own callers. A busy server runs many goroutines, and a batcher
// goroutine waiting for its turn would hold up every decision in its batch.
//
// Every decision is answered by its deadline: a flush's budget ends with the earliest
// deadline in it, and decisions that wait in the queue past theirs are answered with
// an error. Nothing is retried after a round trip that may have reached Redis
// (go-redis retries are off for the store's clients), so a decision is charged at
// most once.
type batcher struct {
	s   *Store
	cfg Batch
	// kick wakes run: the queue became non-empty, or a flush returned.
	kick chan struct{}

	mu       sync.Mutex
	queue    []*call
	inflight int
}

func newBatcher(s *Store, cfg Batch) *batcher {
	return &batcher{s: s, cfg: cfg, kick: make(chan struct{}, 1)}
}

// submit queues c and, if a slot is free and nothing is in flight (or the queue is
// full), flushes the queue on the calling goroutine. c.done is then signalled with
// c's reply, or with a batch (c.lead) that c's caller must flush.
func (b *batcher) submit(c *call) error {
	b.mu.Lock()
	if len(b.queue) >= b.cfg.MaxQueue {
		b.mu.Unlock()
		return ErrOverloaded
	}
	b.queue = append(b.queue, c)
	var batch []*call
	if b.inflight < b.cfg.MaxInFlight && (b.inflight == 0 || b.cfg.MaxDelay == 0 || len(b.queue) >= b.cfg.MaxSize) {
		batch = b.takeLocked()
	}
	n := len(b.queue)
	b.mu.Unlock()
	if batch != nil {
		b.flush(batch)
	} else if n == 1 {
		b.wake()
	}
	return nil
}

// wait waits for c's reply, flushing the batches handed to it meanwhile.
func (b *batcher) wait(c *call) {
	for {
		<-c.done
		lead := c.lead
		if lead == nil {
			return
		}
		c.lead = nil
		b.flush(lead)
	}
}

func (b *batcher) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// run hands out batches that waited MaxDelay and answers queued decisions whose
// deadline passed; it is the batcher's one goroutine.
func (b *batcher) run() {
	defer b.s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-b.kick:
		case <-timer.C:
		case <-b.s.stop:
			b.failQueued()
			return
		}
		b.expire()
		for {
			batch, wait := b.take()
			if batch == nil {
				if wait > 0 {
					timer.Reset(wait)
				}
				break
			}
			handOff(batch)
		}
	}
}

// handOff gives a batch to the caller of its first decision to flush.
func handOff(batch []*call) {
	batch[0].lead = batch
	batch[0].done <- struct{}{}
}

// expire answers the queued decisions whose deadline passed: every flush slot was
// busy (a slow or hung Redis) for their whole budget.
func (b *batcher) expire() {
	now := time.Now()
	var late []*call
	b.mu.Lock()
	q := b.queue[:0]
	for _, c := range b.queue {
		if now.Before(c.deadline) {
			q = append(q, c)
		} else {
			late = append(late, c)
		}
	}
	clear(b.queue[len(q):])
	b.queue = q
	b.mu.Unlock()
	for _, c := range late {
		for _, g := range c.segs {
			g.err = errExpired
		}
		c.done <- struct{}{}
	}
}

var errExpired = fmt.Errorf("%w: %w (waiting for a busy batcher)", ErrUnavailable, context.DeadlineExceeded)

// take returns the next batch, or nil and how long to wait before the queue is due
// (to flush, or to expire its oldest decision).
func (b *batcher) take() ([]*call, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		return nil, 0
	}
	busy := b.inflight >= b.cfg.MaxInFlight
	lingering := !busy && b.inflight > 0 && len(b.queue) < b.cfg.MaxSize
	if busy || lingering {
		now := time.Now()
		expire := b.queue[0].deadline
		for _, c := range b.queue[1:min(len(b.queue), 64)] {
			if c.deadline.Before(expire) {
				expire = c.deadline
			}
		}
		wait := max(expire.Sub(now)+50*time.Microsecond, time.Microsecond)
		if busy {
			return nil, wait
		}
		if linger := b.cfg.MaxDelay - now.Sub(b.queue[0].queued); linger > 0 {
			return nil, min(wait, linger)
		}
	}
	return b.takeLocked(), 0
}

// takeLocked removes up to MaxSize decisions from the queue as a batch in flight.
func (b *batcher) takeLocked() []*call {
	n := min(len(b.queue), b.cfg.MaxSize)
	batch := make([]*call, n)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	b.inflight++
	return batch
}

// flush sends one batch and hands each decision its reply; then, if decisions
// queued meanwhile, it hands the next batch to one of them. Its budget ends with the
// earliest deadline among its decisions.
func (b *batcher) flush(batch []*call) {
	var segs []*segment
	deadline := batch[0].deadline
	for _, c := range batch {
		segs = append(segs, c.segs...)
		if c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := b.s.exec(ctx, segs)
	cancel()
	b.s.report(err)
	// The next batch first: its leader then runs before the callers answered here.
	b.mu.Lock()
	b.inflight--
	var next []*call
	if len(b.queue) > 0 && (b.inflight == 0 || b.cfg.MaxDelay == 0) {
		next = b.takeLocked()
	}
	queued := len(b.queue) > 0
	b.mu.Unlock()
	if next != nil {
		handOff(next)
	} else if queued {
		b.wake()
	}
	for _, g := range segs {
		if err != nil && g.err == nil && !g.replied { // a cluster node may have answered
			g.err = err
		}
		if g.call.pending.Add(-1) == 0 {
			g.call.done <- struct{}{}
		}
	}
}

// failQueued answers the decisions still queued when the store closes.
func (b *batcher) failQueued() {
	b.mu.Lock()
	q := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, c := range q {
		for _, g := range c.segs {
			g.err = ErrClosed
		}
		c.done <- struct{}{}
	}
}
