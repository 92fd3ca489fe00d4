package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range: 1 µs to 1 h at 3 significant figures (about 190 KB per histogram).
// Longer latencies, possible in open loop when the generator falls far behind, are
// recorded as 1 h; Latency.Max keeps the true maximum.
const (
	histMinUs  = 1
	histMaxUs  = int64(time.Hour / time.Microsecond)
	histDigits = 3
)

// NewHistogram returns an empty histogram for latencies in microseconds with
// Result.Histogram's range and precision, so that the two can be merged.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMinUs, histMaxUs, histDigits)
}

// Result is what a run measured. Only requests intended to leave after the warm-up count.
type Result struct {
	Proto       Proto
	URL         string
	Connections int // client connections opened at a time (h1: Connections × Streams)
	Streams     int // requests in flight per connection
	Rate        float64
	// Requests is every measured request that ended: Responses plus errors.
	Requests  int64
	Responses int64
	// Unsent counts measured open-loop requests scheduled before the end but never
	// sent: the generator (or, with RespectLimits, the fields) was behind schedule when
	// the run ended. They are not in Requests.
	Unsent int64
	// Duration runs from the end of the warm-up to the end of the last measured request.
	Duration          time.Duration
	RequestsPerSecond float64
	Latency           Latency
	// Status counts responses by status code.
	Status map[int]int64
	// Errors counts failed requests by kind; every kind is present.
	Errors map[ErrorKind]int64
	// Share429 is the share of Requests answered 429 (0 to 1).
	Share429 float64
	// Bytes counts response body bytes received.
	Bytes int64
	// Fields counts what the measured responses' RateLimit fields said (see FieldStats).
	Fields FieldStats
	// Respect counts the waits of Config.RespectLimits; nil when it was off.
	Respect *RespectStats
	// Histogram holds the latencies in microseconds, for callers that merge runs.
	Histogram *hdrhistogram.Histogram
}

// Latency summarizes response latencies: from the send (closed loop) or the intended
// send time (open loop) to the last byte of the body. Failed requests are not included.
type Latency struct {
	P50, P90, P99, P999, Max, Mean time.Duration
}

// summarize reads the percentiles from h; maxUs is the true maximum (h clamps at 1 h).
func summarize(h *hdrhistogram.Histogram, maxUs int64) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Latency{
		P50:  us(h.ValueAtQuantile(50)),
		P90:  us(h.ValueAtQuantile(90)),
		P99:  us(h.ValueAtQuantile(99)),
		P999: us(h.ValueAtQuantile(99.9)),
		Max:  us(max(maxUs, h.Max())),
		Mean: time.Duration(h.Mean() * float64(time.Microsecond)),
	}
}

// shard gathers the measurements of some workers. Workers share a few shards so a run
// with thousands of workers does not hold thousands of histograms.
type shard struct {
	mu       sync.Mutex
	hist     *hdrhistogram.Histogram
	maxUs    int64
	status   map[int]int64
	errs     [5]int64
	bytes    int64
	lastDone time.Time
}

func newShard() *shard {
	return &shard{hist: NewHistogram(), status: make(map[int]int64)}
}

func (s *shard) response(code int, lat time.Duration, n int64, done time.Time) {
	us := max(int64(lat/time.Microsecond), histMinUs)
	s.mu.Lock()
	s.maxUs = max(s.maxUs, us)
	_ = s.hist.RecordValue(min(us, histMaxUs)) // in range by construction
	s.status[code]++
	s.bytes += n
	if done.After(s.lastDone) {
		s.lastDone = done
	}
	s.mu.Unlock()
}

func (s *shard) failure(k ErrorKind, done time.Time) {
	s.mu.Lock()
	s.errs[k.index()]++
	if done.After(s.lastDone) {
		s.lastDone = done
	}
	s.mu.Unlock()
}

// merge folds the shards into r; call after all workers stopped.
func (r *Result) merge(shards []*shard, measureStart time.Time) {
	r.Histogram = NewHistogram()
	r.Status = make(map[int]int64)
	r.Errors = make(map[ErrorKind]int64, len(ErrorKinds))
	for _, k := range ErrorKinds {
		r.Errors[k] = 0
	}
	var maxUs int64
	var last time.Time
	for _, s := range shards {
		r.Histogram.Merge(s.hist)
		maxUs = max(maxUs, s.maxUs)
		for code, n := range s.status {
			r.Status[code] += n
			r.Responses += n
		}
		for i, n := range s.errs {
			r.Errors[ErrorKinds[i]] += n
		}
		r.Bytes += s.bytes
		if s.lastDone.After(last) {
			last = s.lastDone
		}
	}
	r.Requests = r.Responses
	for _, n := range r.Errors {
		r.Requests += n
	}
	r.Latency = summarize(r.Histogram, maxUs)
	if last.After(measureStart) {
		r.Duration = last.Sub(measureStart)
	}
	if r.Duration > 0 {
		r.RequestsPerSecond = float64(r.Requests) / r.Duration.Seconds()
	}
	if r.Requests > 0 {
		r.Share429 = float64(r.Status[429]) / float64(r.Requests)
	}
}

// jsonResult is the -json file's shape (stable field names for scripts).
type jsonResult struct {
	Proto             string           `json:"proto"`
	URL               string           `json:"url"`
	Connections       int              `json:"connections"`
	Streams           int              `json:"streams"`
	Rate              float64          `json:"rate,omitempty"`
	Requests          int64            `json:"requests"`
	Responses         int64            `json:"responses"`
	Unsent            int64            `json:"unsent,omitempty"`
	DurationSeconds   float64          `json:"duration_seconds"`
	RequestsPerSecond float64          `json:"requests_per_second"`
	LatencyUs         jsonLatency      `json:"latency_us"`
	Status            map[string]int64 `json:"status"`
	Errors            map[string]int64 `json:"errors"`
	Share429          float64          `json:"share_429"`
	Bytes             int64            `json:"bytes"`
	Fields            jsonFields       `json:"fields"`
	Respect           *jsonRespect     `json:"respect_limits,omitempty"`
}

type jsonFields struct {
	Present      int64            `json:"present"`
	Parsed       int64            `json:"parsed"`
	Inconsistent int64            `json:"inconsistent"`
	Problems     map[string]int64 `json:"problems"`
}

type jsonRespect struct {
	Waits         int64   `json:"waits"`
	WaitedSeconds float64 `json:"waited_seconds"`
}

type jsonLatency struct {
	P50  int64   `json:"p50"`
	P90  int64   `json:"p90"`
	P99  int64   `json:"p99"`
	P999 int64   `json:"p999"`
	Max  int64   `json:"max"`
	Mean float64 `json:"mean"`
}

// MarshalJSON writes the result with the field names of the -json file:
// requests_per_second, requests, duration_seconds, latency_us {p50, p90, p99, p999, max,
// mean}, status {code: count}, errors {kind: count}, share_429, bytes, fields {present,
// parsed, inconsistent, problems {problem: count}}, respect_limits {waits,
// waited_seconds} when the clients respected the fields, and the run's parameters.
func (r *Result) MarshalJSON() ([]byte, error) {
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	j := jsonResult{
		Proto:             string(r.Proto),
		URL:               r.URL,
		Connections:       r.Connections,
		Streams:           r.Streams,
		Rate:              r.Rate,
		Requests:          r.Requests,
		Responses:         r.Responses,
		Unsent:            r.Unsent,
		DurationSeconds:   r.Duration.Seconds(),
		RequestsPerSecond: r.RequestsPerSecond,
		LatencyUs: jsonLatency{
			P50: us(r.Latency.P50), P90: us(r.Latency.P90), P99: us(r.Latency.P99),
			P999: us(r.Latency.P999), Max: us(r.Latency.Max),
			Mean: float64(r.Latency.Mean) / float64(time.Microsecond),
		},
		Status:   make(map[string]int64, len(r.Status)),
		Errors:   make(map[string]int64, len(r.Errors)),
		Share429: r.Share429,
		Bytes:    r.Bytes,
	}
	for code, n := range r.Status {
		j.Status[strconv.Itoa(code)] = n
	}
	for k, n := range r.Errors {
		j.Errors[string(k)] = n
	}
	j.Fields = jsonFields{
		Present: r.Fields.Present, Parsed: r.Fields.Parsed, Inconsistent: r.Fields.Inconsistent,
		Problems: make(map[string]int64, len(r.Fields.Problems)),
	}
	for p, n := range r.Fields.Problems {
		j.Fields.Problems[string(p)] = n
	}
	if r.Respect != nil {
		j.Respect = &jsonRespect{Waits: r.Respect.Waits, WaitedSeconds: r.Respect.Waited.Seconds()}
	}
	return json.Marshal(j)
}

// WriteText writes the human summary printed at the end of a run.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := "closed loop"
	if r.Rate > 0 {
		mode = fmt.Sprintf("open loop at %g req/s", r.Rate)
	}
	fmt.Fprintf(&b, "%s %s: %d connections × %d streams, %s\n", r.Proto, r.URL, r.Connections, r.Streams, mode)
	fmt.Fprintf(&b, "requests   %d in %.3fs = %.1f req/s (%d responses, %s body bytes)\n",
		r.Requests, r.Duration.Seconds(), r.RequestsPerSecond, r.Responses, strconv.FormatInt(r.Bytes, 10))
	if r.Unsent > 0 {
		fmt.Fprintf(&b, "unsent     %d scheduled requests were still waiting to be sent at the end\n", r.Unsent)
	}
	l := r.Latency
	fmt.Fprintf(&b, "latency    p50 %v  p90 %v  p99 %v  p99.9 %v  max %v  mean %v\n",
		round(l.P50), round(l.P90), round(l.P99), round(l.P999), round(l.Max), round(l.Mean))
	b.WriteString("status    ")
	if len(r.Status) == 0 {
		b.WriteString(" none")
	}
	for _, code := range slices.Sorted(maps.Keys(r.Status)) {
		fmt.Fprintf(&b, " %d: %d", code, r.Status[code])
	}
	b.WriteString("\nerrors    ")
	some := false
	for _, k := range ErrorKinds {
		if n := r.Errors[k]; n > 0 {
			fmt.Fprintf(&b, " %s: %d", k, n)
			some = true
		}
	}
	if !some {
		b.WriteString(" none")
	}
	fmt.Fprintf(&b, "\n429 share  %.2f%%\n", 100*r.Share429)
	if f := r.Fields; f.Present > 0 || f.Inconsistent > 0 {
		fmt.Fprintf(&b, "fields     RateLimit present %d, parsed %d, inconsistent %d", f.Present, f.Parsed, f.Inconsistent)
		for _, p := range FieldProblems {
			if n := f.Problems[p]; n > 0 {
				fmt.Fprintf(&b, " (%s: %d)", p, n)
			}
		}
		b.WriteString("\n")
	} else {
		b.WriteString("fields     no RateLimit fields\n")
	}
	if r.Respect != nil {
		fmt.Fprintf(&b, "respect    %d requests waited for the fields, %.1fs in all\n", r.Respect.Waits, r.Respect.Waited.Seconds())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// round keeps latencies readable: µs below 10 ms, 0.1 ms above.
func round(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Microsecond)
}
