package testkit

import "time"

// NextPhase returns the first instant at or after t that lies phase (0 to 1) of the way
// into a window of length w aligned to the Unix epoch, as h3edge's fixed and sliding
// windows are: where a test or a scenario starts sending to land at a known point of a
// window.
func NextPhase(t time.Time, w time.Duration, phase float64) time.Time {
	ns := t.UnixNano()
	at := time.Unix(0, ns-ns%int64(w)).Add(time.Duration(phase * float64(w)))
	if at.Before(t) {
		at = at.Add(w)
	}
	return at
}
