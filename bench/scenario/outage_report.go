package scenario

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/h3edge/h3edge/bench/chart"
)

// outageReport writes the report of an analysed run: verdict, table, notes, chart and
// figures.
func outageReport(r *outageRun, a *outageAnalysis) *Report {
	rep := &Report{}
	var fails []string
	rep.Holds, fails = a.holds()
	rep.Table = [][]string{{"phase", "mode", "requests", "200", "429", "503 (problem)", "other", "admitted per edge", "p50", "p99", "max"}}
	for _, ph := range a.phases {
		for _, m := range ph.Modes {
			rep.Table = append(rep.Table, []string{
				fmt.Sprintf("%s %.1f–%.1fs", ph.Phase, ph.From, ph.To), m.Mode, fmt.Sprint(m.Requests), fmt.Sprint(m.OK),
				fmt.Sprint(m.Denied), fmt.Sprint(m.Reduced), fmt.Sprint(m.Other5xx + m.Failed), fmt.Sprint(m.PerEdge),
				ms(time.Duration(m.P50us) * time.Microsecond), ms(time.Duration(m.P99us) * time.Microsecond), ms(time.Duration(m.Maxus) * time.Microsecond),
			})
		}
	}
	if rep.Holds {
		rep.Verdict = fmt.Sprintf("p99 during the outages %s (SIGKILL) and %s (SIGSTOP) against %v (quiet p99 %s); open admitted within its backstop, closed answered 503 with the problem, local held quota ÷ 2 per edge; exact limiting again %s after the restart and %s after SIGCONT; no other 5xx, no failure, no panic",
			ms(a.maxP99(stageKilled)), ms(a.maxP99(stageStopped)), a.bound, ms(a.quietP99), a.recovery[0].Round(time.Millisecond), a.recovery[1].Round(time.Millisecond))
	} else {
		rep.Verdict = strings.Join(fails, "; ")
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("%d edges on one redis-server, redis.timeout %v; policies token_bucket %d per %v keyed by one API key, on_store_failure open (/open/), closed (/closed/), local (/local/); %d h3 connections (%s) × %d streams, open loop at %d req/s per path (%d× the quota), latency from the intended send time",
			outageEdges, outageTimeout, outageQuota, outageWindow, r.sources, outageSources, outageStreams, outageRate, outageRate/outageQuota),
		fmt.Sprintf("faults: SIGKILL at +%.2fs, restart on the same port at +%.2fs (ready +%.2fs), SIGSTOP at +%.2fs, SIGCONT at +%.2fs, end at +%.2fs",
			r.at(r.to(stageBefore)), r.at(r.restarted), r.at(r.to(stageKilled)), r.at(r.to(stageRestarted)), r.at(r.to(stageStopped)), r.end.Sub(r.start).Seconds()),
		fmt.Sprintf("latency bound: redis.timeout + max(5 ms, quiet p99) = %v (quiet p99 %s)", a.bound, ms(a.quietP99)),
		"admissions are counted by when their response arrived; the backstop (open) and the divided quota (local) start full at an outage; recovery is when the first closed-mode 200 after Redis came back arrived, on the slower edge (closed admits only through Redis); a restarted Redis is empty, so its bucket starts full",
	)
	for ei, b := range r.breakers {
		rep.Notes = append(rep.Notes, fmt.Sprintf("edge %d's log: circuit breaker %s", ei+1, strings.Join(b, ", ")))
	}
	if a.stray503 > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d closed-mode 503s outside the outages (a decision over its %v budget)", a.stray503, outageTimeout))
	}
	if r.short {
		rep.Notes = append(rep.Notes, shortScheduleNote())
	}
	rep.Chart = outageChart(r)
	fig := &outageFigures{outageQuota, outageWindow.Seconds(), outageRate, float64(outageTimeout) / 1e6, float64(a.bound) / 1e6,
		[]int64{a.recovery[0].Milliseconds(), a.recovery[1].Milliseconds()}, a.phases, a.checks, r.breakers, map[string][]float64{}}
	for _, ser := range rep.Chart.Series {
		fig.Bins[ser.Name] = ser.Y
	}
	rep.Figures = fig
	return rep
}

// outageChart draws, per 100 ms, each mode's admissions over both edges and the p99
// latency of the requests intended in that bin, one panel each; dashed lines mark the
// faults.
func outageChart(r *outageRun) *chart.Chart {
	total := r.end.Sub(r.start)
	nb := int((total + outageBin - 1) / outageBin)
	admitted := make([][]float64, len(outageModes))
	lat := make([][][]int64, len(outageModes))
	for mi := range outageModes {
		admitted[mi] = make([]float64, nb)
		lat[mi] = make([][]int64, nb)
	}
	for _, rec := range r.recs {
		if rec.code == http.StatusOK {
			if k := int(rec.recv.Sub(r.start) / outageBin); k >= 0 && k < nb {
				admitted[rec.path][k]++
			}
		}
		if rec.code != 0 {
			if k := int(rec.at.Sub(r.start) / outageBin); k >= 0 && k < nb {
				lat[rec.path][k] = append(lat[rec.path][k], rec.recv.Sub(rec.at).Microseconds())
			}
		}
	}
	c := &chart.Chart{
		Title:  "Redis killed, restarted, stopped and continued: per 100 ms, by on_store_failure",
		XLabel: "seconds from start (dashed: faults)",
		YLabel: "admitted per 100 ms  |  p99 latency (ms)",
		Panels: true,
		VLines: []chart.Marker{
			{At: r.at(r.to(stageBefore)), Label: "SIGKILL"},
			{At: r.at(r.to(stageKilled)), Label: "restart"},
			{At: r.at(r.to(stageRestarted)), Label: "SIGSTOP"},
			{At: r.at(r.to(stageStopped)), Label: "SIGCONT"},
		},
	}
	for mi, m := range outageModes {
		s := chart.Series{Name: m + ": admitted", Step: true}
		for k := range nb {
			s.X = append(s.X, (time.Duration(k) * outageBin).Seconds())
			s.Y = append(s.Y, admitted[mi][k])
		}
		c.Series = append(c.Series, s)
	}
	for mi, m := range outageModes {
		s := chart.Series{Name: m + ": p99 ms", Step: true}
		for k := range nb {
			v := 0.0
			if xs := lat[mi][k]; len(xs) > 0 {
				slices.Sort(xs)
				v = float64(xs[int(math.Ceil(0.99*float64(len(xs))))-1]) / 1000
			}
			s.X = append(s.X, (time.Duration(k) * outageBin).Seconds())
			s.Y = append(s.Y, v)
		}
		c.Series = append(c.Series, s)
	}
	return c
}
