package metrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/h3edge/h3edge/edge/metrics"
)

// Instrument counts each request by protocol and status code and hands the rest of
// the chain the request's instant; the registry then serves the series.
func ExampleMetrics_Instrument() {
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg, metrics.Config{})
	if err != nil {
		panic(err)
	}
	h := m.Instrument(func(w http.ResponseWriter, r *http.Request, now time.Time) {
		if r.URL.Path == "/busy" {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("ok")) // an implicit 200
	})
	for _, path := range []string{"/", "/", "/busy"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}

	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == "h3edge_requests_total" {
			var b strings.Builder
			expfmt.MetricFamilyToText(&b, f)
			for _, line := range strings.Split(b.String(), "\n") {
				if strings.HasPrefix(line, "h3edge_") {
					fmt.Println(line)
				}
			}
		}
	}
	// Output:
	// h3edge_requests_total{code="200",proto="h1"} 2
	// h3edge_requests_total{code="429",proto="h1"} 1
}

// A step refused by the stream budget marks its Recorder: requests_total leaves the
// request out (refused_streams_total counts it, through RefusedStream).
func ExampleMarkRefused() {
	reg := metrics.NewRegistry()
	m, _ := metrics.New(reg, metrics.Config{})
	h := m.Instrument(func(w http.ResponseWriter, r *http.Request, now time.Time) {
		m.RefusedStream(r.ProtoMajor, metrics.Rate)
		metrics.MarkRefused(w)
		fmt.Println("refused:", metrics.RecorderOf(w).Refused())
		w.WriteHeader(http.StatusTooManyRequests)
	})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	fams, _ := reg.Gather()
	for _, f := range fams {
		switch f.GetName() {
		case "h3edge_requests_total", "h3edge_refused_streams_total":
			for _, s := range f.GetMetric() {
				if v := s.GetCounter().GetValue(); v > 0 {
					fmt.Println(f.GetName(), v)
				}
			}
		}
	}
	// Output:
	// refused: true
	// h3edge_refused_streams_total 1
}
