package scenario

import (
	"context"
	"strconv"
	"strings"
	"time"
)

const claimOutage = "with Redis SIGKILLed and restarted mid-run, then SIGSTOPped and continued, under steady load: during each outage the client-side p99 stays within redis.timeout + 5 ms; on_store_failure open admits, within its local backstop (the same quota per edge); closed answers 503 with a temporary-reduced-capacity problem; local applies quota ÷ fleet size per edge; no other 5xx, no failed request, no panic; once Redis is back, exact global limiting resumes within 2 s"

// The outage scenario: two edges share one Redis; three token-bucket policies on
// separate paths differ only in on_store_failure. It runs in four steps, one file
// each: the schedule below, measureOutage (outage_measure.go), analyseOutage
// (outage_analysis.go) and outageReport with its chart (outage_report.go).
const (
	outageEdges   = 2
	outageQuota   = 40 // per outageWindow, global
	outageWindow  = time.Second
	outageRate    = 200 // requests per second per path, over both edges: 5× the quota
	outageTimeout = 10 * time.Millisecond
	outageAllow   = 5 * time.Millisecond // latency allowance over redis.timeout
	outageSources = "127.0.1.2-127.0.1.9"
	outageStreams = 8
	outageKey     = "h3bench-outage-key"
	outageSecret  = "h3bench-outage-secret"
	outageBin     = 100 * time.Millisecond
	// outageSlack absorbs the client's view of time in the admission counts: a
	// response seen just after an instant may have been decided just before it.
	outageSlack = 2
	// outageSettle is how long after recovery a fresh bucket's burst has passed (its Q
	// tokens go in Q ÷ demand = 0.2 s), after which admissions follow the refill rate.
	outageSettle = 500 * time.Millisecond
	// outageRecovery is the claim's bound on the time from Redis answering again to
	// exact limiting on every edge.
	outageRecovery = 2 * time.Second
	// outageGuard keeps requests already in flight when an outage begins out of the
	// outage's checks.
	outageGuard = 5 * time.Millisecond
)

var outageModes = []string{"open", "closed", "local"}

// outageFault is what the schedule does to redis-server at the end of a stage.
type outageFault int

const (
	faultNone    outageFault = iota // the run ends
	faultKill                       // SIGKILL, then wait for the process to exit
	faultRestart                    // a new redis-server on the same port, empty
	faultStop                       // SIGSTOP
	faultCont                       // SIGCONT
)

// outageStage is one row of the schedule: a phase of the run, how long it lasts in
// full and in short mode, and the fault that ends it. The phase ends when the fault
// has taken effect (for the restart: when the new server is ready), so measured
// phases are a little shorter or longer than scheduled.
type outageStage struct {
	phase       string // the phase's name in the table and the JSON
	label       string // its name in the short-mode note
	full, short time.Duration
	end         outageFault
}

// length is how long the stage lasts in the mode.
func (st outageStage) length(short bool) time.Duration {
	if short {
		return st.short
	}
	return st.full
}

// outageSchedule is the schedule. The outages last no whole number of the breaker's
// 250 ms probe period, so that a probe does not land on the restart by construction.
// The edges announce themselves every second; the kill comes after both have seen a
// fleet of two.
var outageSchedule = []outageStage{
	{"before", "before", 4 * time.Second, 1300 * time.Millisecond, faultKill},
	{"SIGKILL", "killed", 5130 * time.Millisecond, 1630 * time.Millisecond, faultRestart},
	{"restarted", "restarted", 6 * time.Second, 2200 * time.Millisecond, faultStop},
	{"SIGSTOP", "stopped", 5130 * time.Millisecond, 1130 * time.Millisecond, faultCont},
	{"continued", "continued", 6 * time.Second, 2200 * time.Millisecond, faultNone},
}

// The stages' indices, for the steps that pick a phase by its role.
const (
	stageBefore = iota
	stageKilled
	stageRestarted
	stageStopped
	stageContinued
)

// outageOutages are the stages during which Redis does not answer.
var outageOutages = []int{stageKilled, stageStopped}

// scheduleLength is the run's scheduled length in the mode.
func scheduleLength(short bool) time.Duration {
	var total time.Duration
	for _, st := range outageSchedule {
		total += st.length(short)
	}
	return total
}

// shortScheduleNote says how the short schedule differs from the full one.
func shortScheduleNote() string {
	secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
	var short, full []string
	for _, st := range outageSchedule {
		short = append(short, secs(st.short)+" s "+st.label)
		full = append(full, secs(st.full))
	}
	return "short mode: shorter phases (" + strings.Join(short, ", ") + " instead of " + strings.Join(full, ", ") + " s)"
}

// outageMode is one failure mode's figures in one phase.
type outageMode struct {
	Mode     string `json:"mode"`
	Requests int    `json:"requests"`
	OK       int    `json:"ok_200"`
	Denied   int    `json:"denied_429"`
	// Reduced counts 503s carrying the temporary-reduced-capacity problem and
	// Retry-After; Other5xx every other 5xx; Failed the requests that got no response.
	Reduced  int `json:"reduced_503"`
	Other5xx int `json:"other_5xx"`
	Failed   int `json:"failed"`
	// Latency of responses intended to leave in the phase, from the intended send time.
	P50us int64 `json:"p50_us"`
	P99us int64 `json:"p99_us"`
	Maxus int64 `json:"max_us"`
	// PerEdge counts admissions per edge (by response time within the phase).
	PerEdge []int `json:"admitted_per_edge"`
}

// outagePhase is one phase of the run.
type outagePhase struct {
	Phase string       `json:"phase"`
	From  float64      `json:"from_s"`
	To    float64      `json:"to_s"`
	Modes []outageMode `json:"modes"`
}

// outageCheck is one checked promise.
type outageCheck struct {
	What  string `json:"what"`
	Holds bool   `json:"holds"`
	Got   string `json:"got"`
	// timing marks a promise about latency or speed (a p99, a recovery time, a
	// decision within its budget) rather than about what was decided: the tests
	// assert it only with H3EDGE_PERF=1, since a loaded machine breaks it without a
	// bug.
	timing bool
}

// outageFigures are the outage scenario's measurements (Report.Figures).
type outageFigures struct {
	Quota          int64         `json:"quota"`
	WindowSeconds  float64       `json:"window_seconds"`
	RatePerPath    int           `json:"rate_per_path"`
	TimeoutMs      float64       `json:"redis_timeout_ms"`
	LatencyBoundMs float64       `json:"latency_bound_ms"`
	RecoveryMs     []int64       `json:"recovery_ms"`
	Phases         []outagePhase `json:"phases"`
	Checks         []outageCheck `json:"checks"`
	Breakers       [][]string    `json:"breaker_transitions"`
	// Bins holds the chart's series, one value per 100 ms from the start.
	Bins map[string][]float64 `json:"per_100ms"`
}

// runOutage is the scenario: its schedule (outageSchedule), then the steps.
func runOutage(ctx context.Context, e *env) (*Report, error) {
	m, err := measureOutage(ctx, e, e.opt.Short)
	if err != nil {
		return nil, err
	}
	a := analyseOutage(m)
	return outageReport(m, a), nil
}
