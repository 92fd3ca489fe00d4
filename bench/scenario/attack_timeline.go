package scenario

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench/attack"
	"github.com/h3edge/h3edge/bench/chart"
)

// An attack's time series, over the whole run from the start of the quiet phase:
// per attackSampleEvery, the legitimate clients' p99 and success (each request in the
// sample it was meant to leave in) and what the attacker sent (its own samples, placed
// by its start on the wall clock); the chart marks the attack's start and end and the
// first ban.

// attackSampleEvery is the time series' interval. The legitimate clients send 200
// requests a second, so a sample holds about 50 of them and its p99 is their slowest.
const attackSampleEvery = 250 * time.Millisecond

// attackMaxSamples bounds a time series (10 minutes): a request time far off the run
// is not given a sample.
const attackMaxSamples = 2400

// legitSeries bins the legitimate requests of one h3edge by when each was meant to
// leave. Safe for concurrent use: record is the loads' bench.RequestHook.
type legitSeries struct {
	t0 time.Time // the start of sample 0

	mu   sync.Mutex
	bins []legitBin
}

// legitBin is one sample's requests.
type legitBin struct {
	requests, ok int64
	latencies    []time.Duration // of the responses, whatever their status
}

func (s *legitSeries) record(at time.Time, latency time.Duration, status int) {
	k := int(at.Sub(s.t0) / attackSampleEvery)
	if k < 0 || k >= attackMaxSamples {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k >= len(s.bins) {
		s.bins = append(s.bins, make([]legitBin, k+1-len(s.bins))...)
	}
	b := &s.bins[k]
	b.requests++
	if status == http.StatusOK {
		b.ok++
	}
	if status != 0 {
		b.latencies = append(b.latencies, latency)
	}
}

// p99 returns the p99 latency of sample k's responses in ms, 0 without any.
func (s *legitSeries) p99(k int) float64 {
	if k >= len(s.bins) || len(s.bins[k].latencies) == 0 {
		return 0
	}
	xs := slices.Sorted(slices.Values(s.bins[k].latencies))
	return float64(xs[int(math.Ceil(0.99*float64(len(xs))))-1]) / float64(time.Millisecond)
}

// attackTimeline is the time series of an attack report (JSON "timeline"). Sample i
// covers [StartSec[i], StartSec[i] + IntervalMs); seconds count from the start of the
// quiet phase, the markers' too.
type attackTimeline struct {
	IntervalMs int64     `json:"interval_ms"`
	StartSec   []float64 `json:"start_seconds"`
	// The legitimate clients of the attacked h3edge: requests meant to leave in the
	// sample, their p99 in ms (0 without a response) and the share answered 200 (0
	// without a request); in full mode the unattacked control's p99 as well.
	LegitRequests []int64   `json:"legit_requests"`
	LegitP99ms    []float64 `json:"legit_p99_ms"`
	LegitSuccess  []float64 `json:"legit_success"`
	ControlP99ms  []float64 `json:"control_p99_ms,omitempty"`
	// The attacker: what it sent per second, in AttackerUnit, and the connections it
	// held open (quic-stall: streams) at the sample's end; 0 outside the attack.
	AttackerUnit      string    `json:"attacker_unit"`
	AttackerPerSecond []float64 `json:"attacker_sent_per_second"`
	AttackerOpen      []int64   `json:"attacker_open"`
	// The markers: the start of the attack phase (the ban times count from it), the
	// attacker's end, the first ban (-1: none).
	AttackStartSec float64 `json:"attack_start_at_seconds"`
	AttackEndSec   float64 `json:"attack_end_at_seconds"`
	FirstBanSec    float64 `json:"first_ban_at_seconds"`
}

// newAttackTimeline puts the run's samples on one time line: legit's (and ctl's, if
// any) from their t0, the attacker's from out.Start rounded to a sample (attackT0, when
// the attack phase began, if it has none), running for dur; firstBan counts from
// attackT0, negative if no source was banned.
func newAttackTimeline(legit, ctl *legitSeries, a *attack.Attack, out *attack.Outcome, attackT0 time.Time, dur, firstBan time.Duration) *attackTimeline {
	t0 := legit.t0
	start := out.Start
	if start.IsZero() {
		start = attackT0
	}
	sec := func(t time.Time) float64 { return t.Sub(t0).Seconds() }
	tl := &attackTimeline{IntervalMs: attackSampleEvery.Milliseconds(), AttackerUnit: a.Unit,
		AttackStartSec: sec(attackT0), AttackEndSec: sec(start.Add(dur)), FirstBanSec: -1}
	if firstBan >= 0 {
		tl.FirstBanSec = sec(attackT0.Add(firstBan))
	}
	k0 := max(int(math.Round(float64(start.Sub(t0))/float64(attackSampleEvery))), 0)
	n := len(legit.bins)
	if ctl != nil {
		n = max(n, len(ctl.bins))
	}
	if out.SampleEvery == attackSampleEvery {
		n = max(n, min(k0+len(out.SentPerSample), attackMaxSamples))
	}
	for k := range n {
		tl.StartSec = append(tl.StartSec, (time.Duration(k) * attackSampleEvery).Seconds())
		var b legitBin
		if k < len(legit.bins) {
			b = legit.bins[k]
		}
		tl.LegitRequests = append(tl.LegitRequests, b.requests)
		tl.LegitP99ms = append(tl.LegitP99ms, legit.p99(k))
		tl.LegitSuccess = append(tl.LegitSuccess, float64(b.ok)/float64(max(b.requests, 1)))
		if ctl != nil {
			tl.ControlP99ms = append(tl.ControlP99ms, ctl.p99(k))
		}
		var sent float64
		var open int64
		if i := k - k0; out.SampleEvery == attackSampleEvery && i >= 0 && i < len(out.SentPerSample) {
			sent = float64(out.SentPerSample[i]) / attackSampleEvery.Seconds()
			if i < len(out.OpenPerSample) {
				open = out.OpenPerSample[i]
			}
		}
		tl.AttackerPerSecond = append(tl.AttackerPerSecond, sent)
		tl.AttackerOpen = append(tl.AttackerOpen, open)
	}
	return tl
}

// attackChart draws the time line in three panels: the legitimate p99 (log scale; in
// full mode the unattacked control's too), their success and the attacker's rate;
// dashed lines mark the attack's start and end and the first ban. Samples without a
// legitimate request (a control's without a response) leave a gap.
func attackChart(name string, tl *attackTimeline) *chart.Chart {
	c := &chart.Chart{
		Title:  fmt.Sprintf("h3bench attack %s, per %d ms", name, tl.IntervalMs),
		XLabel: "seconds from the start of the quiet phase (dashed: the attack's start and end)",
		Panels: true, PanelY: true, // each panel's unit is in its series' name
	}
	p99 := chart.Series{Name: "legit p99 ms", Step: true, YLog: true}
	ctl := chart.Series{Name: "control p99 ms", Step: true, Overlay: true}
	ok := chart.Series{Name: "legit ok %", Step: true}
	att := chart.Series{Name: "attacker " + tl.AttackerUnit + "/s", Step: true}
	for k, x := range tl.StartSec {
		lat, share := tl.LegitP99ms[k], 100*tl.LegitSuccess[k]
		if tl.LegitRequests[k] == 0 {
			lat, share = math.NaN(), math.NaN() // a gap: overload's pause before its last phase
		}
		p99.X, p99.Y = append(p99.X, x), append(p99.Y, lat)
		ok.X, ok.Y = append(ok.X, x), append(ok.Y, share)
		att.X, att.Y = append(att.X, x), append(att.Y, tl.AttackerPerSecond[k])
		if tl.ControlP99ms != nil {
			v := tl.ControlP99ms[k]
			if v == 0 {
				v = math.NaN()
			}
			ctl.X, ctl.Y = append(ctl.X, x), append(ctl.Y, v)
		}
	}
	c.Series = []chart.Series{p99, ok, att}
	if tl.ControlP99ms != nil {
		c.Series = slices.Insert(c.Series, 1, ctl)
	}
	c.VLines = []chart.Marker{{At: tl.AttackStartSec, Label: "attack"}}
	if tl.FirstBanSec >= 0 {
		c.XLabel = "seconds from the start of the quiet phase (dashed: the attack's start and end, the first ban)"
		c.VLines = append(c.VLines, chart.Marker{At: tl.FirstBanSec,
			Label: fmt.Sprintf("first ban +%.2fs", tl.FirstBanSec-tl.AttackStartSec)})
	}
	c.VLines = append(c.VLines, chart.Marker{At: tl.AttackEndSec, Label: "attack ends"})
	return c
}
