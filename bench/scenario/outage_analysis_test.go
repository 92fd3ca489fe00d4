package scenario

import (
	"net/http"
	"testing"
	"time"
)

// bucketLoad is how bucketRun's simulated load and bucket misbehave.
type bucketLoad struct {
	rate float64 // the bucket's refill per second (outageQuota is right)
	// decideFrom: no decision before it (a slow first store round trip); requests
	// that arrive earlier wait and are decided then.
	decideFrom time.Duration
	// stallFrom, stallTo: the client sends nothing in between and sends the backlog
	// at stallTo.
	stallFrom, stallTo time.Duration
	lag                time.Duration // from decision to the response's arrival
}

// bucketRun simulates one path of the outage's "before" phase against a token bucket
// of outageQuota: 200 requests per second for 1.3 s.
func bucketRun(l bucketLoad) *outageRun {
	start := time.Unix(1_000_000, 0)
	r := &outageRun{start: start, ends: []time.Time{start.Add(1300 * time.Millisecond)}}
	tokens, last := float64(outageQuota), time.Time{}
	for i := range 260 {
		at := time.Duration(i) * 5 * time.Millisecond
		if at >= l.stallFrom && at < l.stallTo {
			at = l.stallTo
		}
		sent := start.Add(at)
		decided := sent.Add(time.Millisecond)
		if d := start.Add(l.decideFrom); decided.Before(d) {
			decided = d
		}
		if !last.IsZero() {
			tokens = min(float64(outageQuota), tokens+l.rate*decided.Sub(last).Seconds())
		}
		last = decided
		rec := fleetRecord{path: 0, sent: sent, recv: decided.Add(l.lag), code: http.StatusTooManyRequests}
		if tokens >= 1 {
			tokens--
			rec.code = http.StatusOK
		}
		r.recs = append(r.recs, rec)
	}
	return r
}

// TestCheckExact: the "before" exactness check holds for an exact bucket however late
// its first decision, slow its answers or stalled its client, and fails for a bucket
// that admits more than its refill.
func TestCheckExact(t *testing.T) {
	const ms = time.Millisecond
	q := float64(outageQuota)
	for _, tc := range []struct {
		name  string
		load  bucketLoad
		holds bool
	}{
		{"exact", bucketLoad{rate: q, lag: ms}, true},
		{"exact, first decision at 0.49 s, answers 20 ms after", bucketLoad{rate: q, decideFrom: 490 * ms, lag: 20 * ms}, true},
		{"exact, answers 300 ms after", bucketLoad{rate: q, lag: 300 * ms}, true},
		{"exact, client stalled 0.2–0.6 s", bucketLoad{rate: q, stallFrom: 200 * ms, stallTo: 600 * ms, lag: ms}, true},
		{"refills 1.5× too fast", bucketLoad{rate: 1.5 * q, lag: ms}, false},
		{"refills 1.5× too fast, first decision at 0.49 s", bucketLoad{rate: 1.5 * q, decideFrom: 490 * ms, lag: 20 * ms}, false},
		{"refills 1.5× too fast, answers 60 ms after", bucketLoad{rate: 1.5 * q, lag: 60 * ms}, false},
		{"refills 1.5× too fast, client stalled 0.2–0.6 s", bucketLoad{rate: 1.5 * q, stallFrom: 200 * ms, stallTo: 600 * ms, lag: ms}, false},
		{"admits everything", bucketLoad{rate: 1e6, lag: ms}, false},
	} {
		r := bucketRun(tc.load)
		a := &outageAnalysis{}
		a.checkExact(r, 0, r.start.Add(outageSettle), r.ends[0], "before")
		if c := a.checks[0]; c.Holds != tc.holds {
			t.Errorf("%s: holds %v, want %v: %s", tc.name, c.Holds, tc.holds, c.Got)
		}
	}
}
