package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Buckets, in seconds. Requests include the origin's time; store round trips are
// budgeted at redis.timeout (10ms by default).
var (
	requestBuckets = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	storeBuckets   = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
)

// latencyHist is a histogram of request durations with the buckets requestBuckets. It
// counts with integer atomics only — client_golang's histogram adds the float sum in a
// compare-and-swap loop, which contended cores retry — and is exposed as a constant
// histogram at scrape time.
type latencyHist struct {
	counts [len(requestBuckets) + 1]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Int64                           // nanoseconds
}

// latencyBounds are requestBuckets in nanoseconds.
var latencyBounds = func() (b [len(requestBuckets)]time.Duration) {
	for i, s := range requestBuckets {
		b[i] = time.Duration(s * float64(time.Second))
	}
	return b
}()

// observe counts one request that took d.
func (l *latencyHist) observe(d time.Duration) {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	l.counts[i].Add(1)
	l.sum.Add(int64(d))
}

// collect sends the histogram as one sample with labels. Buckets and sum are read one
// after the other, so under load they may be a few requests apart.
func (l *latencyHist) collect(ch chan<- prometheus.Metric, desc *prometheus.Desc, labels ...string) {
	buckets := make(map[float64]uint64, len(requestBuckets))
	var n uint64
	for i := range l.counts {
		n += l.counts[i].Load()
		if i < len(requestBuckets) {
			buckets[requestBuckets[i]] = n
		}
	}
	ch <- prometheus.MustNewConstHistogram(desc, n, time.Duration(l.sum.Load()).Seconds(), buckets, labels...)
}
