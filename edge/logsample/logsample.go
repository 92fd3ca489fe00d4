// Package logsample bounds a log stream, such as one line per rejected request, to a
// number of lines per second, counting the lines it holds back.
package logsample

import (
	"sync"
	"time"
)

// Sampler bounds a log stream, such as one line per rejected request, to at most limit
// lines per second, counting the lines it holds back so the next line let through can
// say how many were suppressed. A flood of 429s thus costs one mutex and a few integers
// per rejection, not a log line each. It is safe for concurrent use.
type Sampler struct {
	limit int

	mu         sync.Mutex
	second     int64  // the Unix second being counted
	n          int    // events let through in that second
	suppressed uint64 // events held back since the last one let through
}

// New returns a Sampler letting through at most limit events per second; limit
// 0 or less suppresses every event.
func New(limit int) *Sampler { return &Sampler{limit: limit} }

// Allow reports whether an event at now may be logged. When it may, suppressed is the
// number of events held back since the previous one let through; log it along.
func (s *Sampler) Allow(now time.Time) (ok bool, suppressed uint64) {
	sec := now.Unix()
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec != s.second {
		s.second, s.n = sec, 0
	}
	if s.n >= s.limit {
		s.suppressed++
		return false, 0
	}
	s.n++
	suppressed, s.suppressed = s.suppressed, 0
	return true, suppressed
}
