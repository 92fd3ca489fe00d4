package scenario

import (
	"fmt"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
)

// noisyAnalysis is the claim judged on a run's phases.
type noisyAnalysis struct {
	quiet, attacked, unprotected noisyPhase
	// factor is the attacked p99 over the quiet p99; limit the most the claim allows.
	factor, limit float64
	holds         bool
	// retried, if set, says that short mode measured the h3edge pair again, and what
	// the first attempt gave.
	retried string
}

// analyseNoisy judges the claim: under attack, h3edge keeps the legitimate clients'
// success at the floor and their p99 within the limit of their quiet p99.
func analyseNoisy(sched noisySchedule, phases []noisyPhase) noisyAnalysis {
	find := func(name string) noisyPhase {
		for _, p := range phases {
			if p.Phase == name {
				return p
			}
		}
		return noisyPhase{}
	}
	a := noisyAnalysis{quiet: find("quiet, h3edge"), attacked: find("attack, h3edge"), unprotected: find("attack, bare")}
	a.factor = float64(a.attacked.LegitP99us) / float64(max(a.quiet.LegitP99us, 1))
	a.limit = noisyMaxP99Factor
	if sched.short {
		a.limit = max(noisyShortFactor, float64(a.quiet.LegitP99us+noisyShortSlack.Microseconds())/float64(max(a.quiet.LegitP99us, 1)))
	}
	a.holds = a.attacked.LegitSuccess >= noisyMinSuccess && a.factor <= a.limit
	return a
}

// noisyReport writes the report of a judged run: verdict, table, chart, notes and
// figures.
func noisyReport(sched noisySchedule, phases []noisyPhase, a noisyAnalysis) *Report {
	rep := &Report{Holds: a.holds}
	rep.Verdict = fmt.Sprintf("under attack, h3edge kept legitimate success at %.2f%% (floor %.0f%%) and p99 at %.2f ms = %.2f× the quiet p99 of %.2f ms (limit %.1f×); without protection: %.2f%% and %.2f ms",
		100*a.attacked.LegitSuccess, 100*noisyMinSuccess, float64(a.attacked.LegitP99us)/1000, a.factor,
		float64(a.quiet.LegitP99us)/1000, a.limit, 100*a.unprotected.LegitSuccess, float64(a.unprotected.LegitP99us)/1000)
	rep.Table = [][]string{{"phase", "legit ok", "legit p50", "legit p99", "legit max", "attacker sent", "200/429/reset/timeout/other", "unsent", "attack share", "server CPU"}}
	for _, p := range phases {
		attack, unsent := "-", "-"
		if p.Attack {
			ae := p.AttackErrors
			attack = fmt.Sprintf("%d/%d/%d/%d/%d", p.AttackOK, p.Attack429, ae[bench.ErrReset], ae[bench.ErrTimeout], ae[bench.ErrRefused]+ae[bench.ErrTLS]+ae[bench.ErrOther])
			unsent = fmt.Sprint(p.AttackUnsent)
		}
		rep.Table = append(rep.Table, []string{
			p.Phase, fmt.Sprintf("%.2f%%", 100*p.LegitSuccess),
			ms(time.Duration(p.LegitP50us) * time.Microsecond), ms(time.Duration(p.LegitP99us) * time.Microsecond),
			ms(time.Duration(p.LegitMaxus) * time.Microsecond),
			fmt.Sprint(p.AttackSent), attack, unsent, fmt.Sprintf("%.1f%%", 100*p.AttackShare), fmt.Sprintf("%.0f%%", 100*p.ServerBusy),
		})
	}
	rep.Chart = noisyChart(phases, a)
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("legitimate: %d h3 clients (%s) fetching /, %d req/s each, open loop; attacker: %v fetching %s, 4 connections × 64 streams, open loop at %.0f req/s; %v warm-up + %v per phase",
			len(sched.legit), noisyLegitSources, noisyLegitRate, noisyAttacker, noisyAttackPath, sched.attackRate, sched.warm, sched.dur),
		fmt.Sprintf("h3edge: default ip: budgets (streams 200/s, burst 400 per source) and penalty box (50 rejections in 10s: banned, datagrams dropped), policy per-ip token_bucket %d/s; bare: no protection", noisyPolicyQuota),
		"attack share counts the requests the attacker scheduled, sent or not (unsent: its workers were stuck on dropped or refused requests when the phase ended)",
		"latency is measured from each request's intended send time (no coordinated omission), in the same client process as the attacker")
	if sched.short {
		rep.Notes = append(rep.Notes, fmt.Sprintf("short mode allows %.0f× or %v above the quiet p99 instead of %.1f×: the p99 of 600 samples swings that much between quiet runs here",
			noisyShortFactor, noisyShortSlack, noisyMaxP99Factor))
	}
	if a.retried != "" {
		rep.Remeasured = true
		rep.Notes = append(rep.Notes, a.retried)
	}
	rep.Figures = &noisyFigures{sched.legitRate, sched.attackRate, phases, a.factor}
	return rep
}

// noisyChart draws the legitimate clients' p50 and p99 per phase, and the claim's
// limit over the quiet p99.
func noisyChart(phases []noisyPhase, a noisyAnalysis) *chart.Chart {
	ch := &chart.Chart{
		Title:  "Legitimate clients' latency with and without a noisy neighbour",
		XLabel: "phase",
		YLabel: "latency of legitimate requests (ms)",
	}
	p50 := chart.Series{Name: "legit p50"}
	p99 := chart.Series{Name: "legit p99"}
	for _, p := range phases {
		ch.Categories = append(ch.Categories, p.Phase)
		p50.Y = append(p50.Y, float64(p.LegitP50us)/1000)
		p99.Y = append(p99.Y, float64(p.LegitP99us)/1000)
	}
	ch.Series = []chart.Series{p50, p99}
	ch.HLines = []chart.Marker{{At: a.limit * float64(a.quiet.LegitP99us) / 1000, Label: fmt.Sprintf("%.1f× quiet p99", a.limit)}}
	return ch
}
