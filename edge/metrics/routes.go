package metrics

import (
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/h3edge/h3edge/edge/upstream"
)

// routeCounts are one route's responses by protocol and status code.
type routeCounts [numProtos][numCodes]atomic.Uint64

// CountRoute counts a response of the route called name, for route_requests_total:
// major is the request's ProtoMajor, code its status (0: 200, nothing written). Route
// names come from the configuration only, so the set of series is bounded by what the
// configurations in force have named; a route's counts outlive reloads.
func (m *Metrics) CountRoute(name string, major, code int) {
	if m == nil {
		return
	}
	if code == 0 {
		code = http.StatusOK
	}
	if code < minCode || code > maxCode {
		return // net/http allows up to 999; requests_total has those
	}
	c, ok := m.routes.Load(name)
	if !ok {
		c, _ = m.routes.LoadOrStore(name, new(routeCounts))
	}
	c.(*routeCounts)[ProtoOf(major)][code-minCode].Add(1)
}

// upstreams exposes the routes' and the pools' metrics (DESIGN.md §9) at scrape time.
type upstreams struct {
	m                                         *Metrics
	requests, duration, healthy, retr, routed *prometheus.Desc
}

func newUpstreams(m *Metrics) *upstreams {
	return &upstreams{
		m: m,
		requests: prometheus.NewDesc(name("upstream_requests_total"),
			`Tries sent to each target, by the status code of its response ("error": none came: connect error, reset, timeout).`,
			[]string{"upstream", "target", "code"}, nil),
		duration: prometheus.NewDesc(name("upstream_duration_seconds"),
			"Time from sending a try to its response header.", []string{"upstream"}, nil),
		healthy: prometheus.NewDesc(name("upstream_healthy"),
			"1 while a target is in rotation, 0 while it is ejected or failing its health checks.",
			[]string{"upstream", "target"}, nil),
		retr: prometheus.NewDesc(name("upstream_retries_total"),
			"Tries after a request's first, on another target.", []string{"upstream"}, nil),
		routed: prometheus.NewDesc(name("route_requests_total"),
			"Requests answered, by the route that took them (names from the configuration), protocol and status code; requests no route took are in requests_total only.",
			[]string{"route", "proto", "code"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *upstreams) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.duration
	ch <- c.healthy
	ch <- c.retr
	ch <- c.routed
}

// Collect implements prometheus.Collector.
func (c *upstreams) Collect(ch chan<- prometheus.Metric) {
	c.m.routes.Range(func(k, v any) bool {
		counts := v.(*routeCounts)
		for p := range counts {
			for i := range counts[p] {
				if n := counts[p][i].Load(); n > 0 {
					ch <- prometheus.MustNewConstMetric(c.routed, prometheus.CounterValue, float64(n), k.(string), protoNames[p], codeNames[i])
				}
			}
		}
		return true
	})
	if c.m.cfg.Pools == nil {
		return
	}
	for _, p := range c.m.cfg.Pools() {
		st := p.Stats()
		ch <- prometheus.MustNewConstMetric(c.retr, prometheus.CounterValue, float64(st.Retries), st.Name)
		buckets := make(map[float64]uint64, len(upstream.DurationBuckets))
		var n uint64
		for i, v := range st.Duration {
			n += v
			if i < len(upstream.DurationBuckets) {
				buckets[upstream.DurationBuckets[i]] = n
			}
		}
		ch <- prometheus.MustNewConstHistogram(c.duration, n, st.DurationSum.Seconds(), buckets, st.Name)
		for _, t := range st.Targets {
			h := 0.0
			if t.Healthy {
				h = 1
			}
			ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, h, st.Name, t.URL)
			for code, v := range t.Codes {
				ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(v), st.Name, t.URL, strconv.Itoa(code))
			}
			if t.Errors > 0 {
				ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(t.Errors), st.Name, t.URL, "error")
			}
		}
	}
}
