// Package overload tells the edge when to shed new work: when the process nears its
// memory limit (GOMEMLIMIT, or the one h3edge sets from its cgroup) or holds more
// goroutines than a bound — a sign that requests and connections arrive faster than
// the scheduler retires them. A Sampler reads runtime/metrics a few times a second on
// its own goroutine and keeps the verdict in one atomic flag, so the per-request and
// per-connection cost of asking is an atomic load. The edge answers new work while the
// flag is up with its cheapest refusal (QUIC CONNECTION_REFUSED, a TCP reset at accept,
// a prebuilt 503 with Retry-After) and keeps serving what it has admitted.
package overload

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// Thresholds, as fractions of the bounds: shedding starts at the first and stops
// below the second, so that the flag does not flap sample after sample.
const (
	memoryHigh, memoryLow         = 0.90, 0.80
	goroutinesHigh, goroutinesLow = 1.00, 0.90
)

// DefaultInterval is how often a Sampler samples when Config.Interval is zero.
const DefaultInterval = 100 * time.Millisecond

// Config sets a Sampler's bounds.
type Config struct {
	// MaxGoroutines is the goroutine count above which new work is shed, until it
	// falls below 90 % of it. If zero or negative, goroutines do not shed.
	MaxGoroutines int
	// Memory sheds while the memory the Go runtime holds (what GOMEMLIMIT counts:
	// mapped memory minus what was returned to the system) is at or above 90 % of the
	// process's memory limit, until it falls below 80 %. The limit is read at every
	// sample (debug.SetMemoryLimit(-1)), so a limit set later applies; with none set
	// (math.MaxInt64) memory never sheds.
	Memory bool
	// Interval is the time between samples. If zero, DefaultInterval.
	Interval time.Duration
}

// Reason says why a Sampler sheds.
type Reason uint8

// Reasons.
const (
	None Reason = iota
	Memory
	Goroutines
)

func (r Reason) String() string {
	switch r {
	case Memory:
		return "memory"
	case Goroutines:
		return "goroutines"
	}
	return "none"
}

// Sampler samples the runtime and says whether to shed. It is safe for concurrent use.
type Sampler struct {
	cfg     atomic.Pointer[Config]
	reason  atomic.Uint32 // Reason; None: not shedding
	samples []metrics.Sample
	// Last sample, for Stats.
	goroutines, used, limit atomic.Int64
	episodes                atomic.Uint64
}

// New returns a Sampler for cfg. Call Run to start sampling.
func New(cfg Config) *Sampler {
	s := &Sampler{samples: []metrics.Sample{
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}}
	s.Set(cfg)
	return s
}

// Set replaces the bounds; the next sample applies them.
func (s *Sampler) Set(cfg Config) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	s.cfg.Store(&cfg)
}

// Shedding reports whether new work is to be refused now: one atomic load.
func (s *Sampler) Shedding() bool { return s.reason.Load() != uint32(None) }

// Run samples until done is closed. Run it on a goroutine of its own, once.
func (s *Sampler) Run(done <-chan struct{}) {
	for {
		cfg := s.cfg.Load()
		s.sample(cfg)
		t := time.NewTimer(cfg.Interval)
		select {
		case <-done:
			t.Stop()
			s.reason.Store(uint32(None))
			return
		case <-t.C:
		}
	}
}

// sample reads the runtime once and sets the verdict.
func (s *Sampler) sample(cfg *Config) {
	metrics.Read(s.samples)
	g := int64(s.samples[0].Value.Uint64())
	used := int64(s.samples[1].Value.Uint64() - s.samples[2].Value.Uint64())
	limit := debug.SetMemoryLimit(-1)
	s.goroutines.Store(g)
	s.used.Store(used)
	s.limit.Store(limit)

	was := Reason(s.reason.Load())
	memHigh := func(f float64) bool {
		return cfg.Memory && limit > 0 && limit < math.MaxInt64 && float64(used) >= f*float64(limit)
	}
	goHigh := func(f float64) bool { return cfg.MaxGoroutines > 0 && float64(g) >= f*float64(cfg.MaxGoroutines) }
	now := None
	switch {
	case memHigh(memoryHigh), was == Memory && memHigh(memoryLow):
		now = Memory
	case goHigh(goroutinesHigh), was == Goroutines && goHigh(goroutinesLow):
		now = Goroutines
	}
	if now != None && was == None {
		s.episodes.Add(1)
	}
	s.reason.Store(uint32(now))
}

// Stats is a Sampler's last sample and verdict.
type Stats struct {
	Reason      Reason // why it sheds now; None: it does not
	Goroutines  int64
	MemoryUsed  int64 // bytes the runtime holds, as GOMEMLIMIT counts them
	MemoryLimit int64 // the limit in force; math.MaxInt64: none
	// Episodes counts the times shedding began.
	Episodes uint64
}

// Stats returns the last sample.
func (s *Sampler) Stats() Stats {
	return Stats{Reason: Reason(s.reason.Load()), Goroutines: s.goroutines.Load(), MemoryUsed: s.used.Load(),
		MemoryLimit: s.limit.Load(), Episodes: s.episodes.Load()}
}
