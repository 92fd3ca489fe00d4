package scenario

import (
	"fmt"
	"slices"
	"strings"

	"github.com/h3edge/h3edge/bench/chart"
)

// dropCostReport writes the report of an analysed run: verdict, table, chart, notes
// and figures.
func dropCostReport(sched dropSchedule, a *dropAnalysis, short bool) *Report {
	rep := &Report{Holds: len(a.failed) == 0}
	if rep.Holds {
		rep.Verdict = strings.Join(a.held, "; ")
	} else {
		rep.Verdict = strings.Join(a.failed, "; ") + " (held: " + strings.Join(a.held, "; ") + ")"
	}
	rep.Table = [][]string{{"layer", "units refused", "units/s", "server CPU", "µs/unit", "spread", "× cheaper than full 429", "client saw"}}
	for _, r := range a.results {
		var units, cpu float64
		for _, rd := range r.Rounds {
			units, cpu = units+rd.Units, cpu+rd.CPUms
		}
		cheaper := "–"
		if r.Cheaper > 0 {
			cheaper = fmt.Sprintf("%.1f× (vs %s)", r.Cheaper, a.byKey[r.Ref].Name)
		}
		if r.Key == "full-h3" || r.Key == "full-h2" {
			cheaper = "1×"
		}
		rep.Table = append(rep.Table, []string{
			r.Name, fmt.Sprintf("%.0f", units), fmt.Sprintf("%.0f", r.UnitsPerSec),
			fmt.Sprintf("%.0f ms (%.0f%%)", cpu, 100*r.ServerBusy),
			fmt.Sprintf("%.2f", r.PerUnitUs), fmt.Sprintf("%.2f–%.2f", r.LowUs, r.HighUs), cheaper,
			clientSummary(r.Rounds),
		})
	}
	rep.Chart = dropCostChart(a, sched.factor)

	rep.Notes = append(rep.Notes,
		fmt.Sprintf("one fresh h3edge per layer on CPU 0, flooded from its own loopback sources (client on CPU 1) for %d round(s) of %v after a %v warm-up, layers interleaved; µs/unit is the median over rounds of h3edge's utime+stime (/proc/PID/stat, 10 ms ticks) ÷ the units its own counters show", sched.rounds, sched.dur, sched.warm),
		"units: dropped_datagrams_total{reason=banned} + {reason=kernel} (the kernel's ban filter); refused_connections_total{proto=h3,reason=rate}; refused_connections_total{proto=tcp,reason=banned}; refused_streams_total{proto=h3|h2,reason=rate}; requests_total{code=429} (code=200 for the served row)",
		"a refused QUIC connection is a real client's handshake (quic-go, X25519 only so the first flight is one Initial): h3edge first asks a source over its budget for a Retry (VerifySourceAddress), then refuses the token-carrying Initial with CONNECTION_REFUSED, so each costs two Initials parsed, a token sealed and opened, Initial keys derived and two packets sent; h3edge counts a little more than the client saw when quic-go's queue of 4 dropped a CONNECTION_REFUSED and the client sent its Initial again",
		"* outside the claim: the replayed Initial is the refusal step alone (a captured token-carrying Initial sent again and again from its source): quic-go answers few of them (its CONNECTION_REFUSED queue holds 4) and drops many unread; the served 200 is the demo origin with no policy, for scale",
		"× cheaper compares with the full 429 on the same transport: h3 for the datagram, QUIC and h3 stream rows; h2 for the TCP accept and the prebuilt 429",
		"units/s is what one client CPU could send, and the cost per unit falls as the server gets busier (fuller recvmmsg batches, fewer wake-ups of the Go runtime): a layer the flooder keeps only 20–40 % busy pays a wake-up per unit",
		"h3edge's CPU includes the kernel's loopback delivery of its own replies (run in the sender's context) but not the delivery of the flood to its socket (run in the flooder's context)")
	for _, r := range a.results {
		if len(r.Stray) > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: other counters moved too: %v", r.Key, r.Stray))
		}
	}
	if short {
		rep.Notes = append(rep.Notes, fmt.Sprintf("short mode checks %.0f× for the datagram and lets a layer reach %.2f× the next: one sub-second flood gives each layer a few dozen 10 ms CPU ticks", sched.factor, sched.slack))
	}
	rep.Figures = &dropCostFigures{sched.factor, sched.slack, sched.rounds, sched.dur.Seconds(), a.results}
	return rep
}

// dropCostChart draws each layer's CPU per unit (log scale) with its spread, and the
// claim's line: the full 429 on HTTP/3 divided by the factor.
func dropCostChart(a *dropAnalysis, factor float64) *chart.Chart {
	ch := &chart.Chart{
		Title:  "h3edge CPU per refused unit, by layer (log scale; * outside the claim)",
		XLabel: "layer (whiskers: spread over rounds)",
		YLabel: "server CPU per unit (µs)",
		YLog:   true,
	}
	bar := chart.Series{Name: "CPU per unit (µs)"}
	for _, r := range a.results {
		ch.Categories = append(ch.Categories, r.label)
		bar.Y, bar.Low, bar.High = append(bar.Y, r.PerUnitUs), append(bar.Low, r.LowUs), append(bar.High, r.HighUs)
	}
	ch.Series = []chart.Series{bar}
	ch.HLines = []chart.Marker{{At: a.byKey["full-h3"].PerUnitUs / factor, Label: fmt.Sprintf("full 429 (h3) ÷ %.0f", factor)}}
	return ch
}

// clientSummary sums what the flooder saw over the rounds: "sent N: outcome n, …".
func clientSummary(rounds []dropRound) string {
	total := make(map[string]int64)
	for _, r := range rounds {
		for k, v := range r.Client.Outcomes {
			total[k] += v
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range total {
			if !yield(k) {
				return
			}
		}
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, total[k]))
	}
	return strings.Join(parts, ", ")
}
