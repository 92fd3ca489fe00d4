package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the state of the store's circuit breaker.
type BreakerState int32

const (
	// BreakerClosed: decisions go to Redis.
	BreakerClosed BreakerState = iota
	// BreakerOpen: Redis failed repeatedly; decisions fail at once with
	// ErrCircuitOpen, without touching Redis, while a probe checks whether it answers.
	BreakerOpen
)

func (b BreakerState) String() string {
	if b == BreakerOpen {
		return "open"
	}
	return "closed"
}

// BreakerConfig configures the circuit breaker.
type BreakerConfig struct {
	// Failures is how many round trips in a row must fail, within Period, to open the
	// breaker. If zero, 5 is used.
	Failures int
	// Period bounds how long those failures may take. If zero, 1s is used.
	Period time.Duration
	// Probe is how often an open breaker asks Redis (PING, then loading the scripts
	// and measuring the clock) whether it is back; it closes as soon as Redis answers.
	// If zero, 250ms is used.
	Probe time.Duration
	// OnChange, if not nil, is called on every transition (for metrics and
	// readiness), from the goroutine that caused it.
	OnChange func(from, to BreakerState)
}

func (c *BreakerConfig) resolve() error {
	c.Failures = cmpOr(c.Failures, 5)
	c.Period = cmpOr(c.Period, time.Second)
	c.Probe = cmpOr(c.Probe, 250*time.Millisecond)
	if c.Failures < 0 || c.Period < 0 || c.Probe < 0 {
		return errors.New("redisstore: Breaker: values must not be negative")
	}
	return nil
}

// breaker counts failed round trips in a row.
type breaker struct {
	failures int
	period   time.Duration
	onChange func(from, to BreakerState)

	state  atomic.Int32
	streak atomic.Int32 // failures in a row; read on every success without locking

	mu    sync.Mutex
	since time.Time // when the streak began
}

func (b *breaker) get() BreakerState { return BreakerState(b.state.Load()) }

func (b *breaker) allow() bool { return b.get() == BreakerClosed }

func (b *breaker) success() {
	if b.streak.Load() != 0 {
		b.streak.Store(0)
	}
}

// failure counts a failed round trip and reports whether it opened the breaker.
func (b *breaker) failure(now time.Time) bool {
	b.mu.Lock()
	n := b.streak.Load()
	if n == 0 || now.Sub(b.since) > b.period {
		n, b.since = 0, now
	}
	n++
	b.streak.Store(n)
	opened := int(n) >= b.failures && b.state.CompareAndSwap(int32(BreakerClosed), int32(BreakerOpen))
	b.mu.Unlock()
	if opened && b.onChange != nil {
		b.onChange(BreakerClosed, BreakerOpen)
	}
	return opened
}

// open opens the breaker regardless of the count (Redis unreachable at start) and
// starts the probe.
func (b *breaker) open(s *Store) {
	if b.state.CompareAndSwap(int32(BreakerClosed), int32(BreakerOpen)) {
		if b.onChange != nil {
			b.onChange(BreakerClosed, BreakerOpen)
		}
		s.startProbe()
	}
}

func (b *breaker) close() {
	b.streak.Store(0)
	if b.state.CompareAndSwap(int32(BreakerOpen), int32(BreakerClosed)) && b.onChange != nil {
		b.onChange(BreakerOpen, BreakerClosed)
	}
}

// startProbe starts the probe unless it runs already.
func (s *Store) startProbe() {
	if s.closed.Load() || !s.probing.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go s.probe()
}

// probe asks Redis until it answers, then closes the breaker: a restarted Redis has
// lost the scripts, so they are loaded again, and the clock is measured again.
func (s *Store) probe() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.Breaker.Probe)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.probing.Store(false)
			return
		case <-t.C:
		}
		// The probe runs in the background, not on a request's path: give it a second,
		// so a busy machine or a Redis that just restarted is not judged down for being
		// slow to load the scripts.
		ctx, cancel := context.WithTimeout(context.Background(), max(8*s.timeout, time.Second))
		err := s.rdb.Ping(ctx).Err()
		if err == nil {
			err = s.sync(ctx, 3)
		}
		cancel()
		if err == nil {
			s.log.Info("redis answers again: circuit breaker closed")
			s.probing.Store(false) // before closing, so a new failure can start a probe
			s.br.close()
			return
		}
	}
}
