package scenario

import (
	"fmt"
	"slices"

	"github.com/h3edge/h3edge/bench/chart"
)

// analyseBaseline summarizes each protocol's pairs (median ratio and spread, median
// throughput and CPU per request of each server) and judges it by the floor.
func analyseBaseline(sched baselineSchedule, m *baselineMeasured) []baselineProto {
	var protos []baselineProto
	for _, bs := range m.series {
		bp := baselineProto{Proto: bs.proto, Floor: sched.floor, Ratios: bs.ratios}
		bp.Median, bp.Min, bp.Max = median(bs.ratios), slices.Min(bs.ratios), slices.Max(bs.ratios)
		bp.EdgeRPS, bp.BareRPS = median(bs.edgeRPS), median(bs.bareRPS)
		bp.EdgeCPUus, bp.BareCPUus = median(bs.edgeCPU), median(bs.bareCPU)
		if bp.BareCPUus > 0 {
			bp.CPURatio = bp.EdgeCPUus / bp.BareCPUus
		}
		bp.ServerBusyLo = bs.busyLo
		bp.Holds = bp.Median >= sched.floor
		bp.EdgePeakRSS, bp.BarePeakRSS = m.edgePeak, m.barePeak
		protos = append(protos, bp)
	}
	return protos
}

// baselineReport writes the report of the judged protocols: verdict, table, chart,
// notes and figures.
func baselineReport(sched baselineSchedule, m *baselineMeasured, protos []baselineProto) *Report {
	rep := &Report{Holds: true}
	rep.Table = [][]string{{"proto", "h3edge req/s", "bare req/s", "ratio (median)", "spread", "h3edge CPU/req", "bare CPU/req", "CPU ratio", "floor", "ok"}}
	pairsNote := fmt.Sprintf("%d interleaved pair(s) per protocol (h3edge then bare), %v warm-up + %v each; CPU from /proc/PID/stat (10 ms ticks)", sched.pairs, sched.warm, sched.dur)
	if sched.short {
		pairsNote = fmt.Sprintf("%d pair(s) per protocol, the two servers side by side (both on CPU 0, loaded at once), %v warm-up + %v; CPU from /proc/PID/stat (10 ms ticks); short mode checks a looser floor (%.1f) and re-measures a protocol under it up to four times (median), since one sub-second pair is noisy", sched.pairs, sched.warm, sched.dur, sched.floor)
	}
	rep.Notes = append([]string{pairsNote}, m.notes...)
	var worst []string
	for _, bp := range protos {
		rep.Holds = rep.Holds && bp.Holds
		rep.Table = append(rep.Table, []string{
			string(bp.Proto), fmt.Sprintf("%.0f", bp.EdgeRPS), fmt.Sprintf("%.0f", bp.BareRPS),
			fmt.Sprintf("%.2f", bp.Median), fmt.Sprintf("%.2f–%.2f", bp.Min, bp.Max),
			fmt.Sprintf("%.1f µs", bp.EdgeCPUus), fmt.Sprintf("%.1f µs", bp.BareCPUus),
			fmt.Sprintf("%.2f", bp.CPURatio), fmt.Sprintf("%.1f", bp.Floor), okMark(bp.Holds),
		})
		worst = append(worst, fmt.Sprintf("%s %.2f", bp.Proto, bp.Median))
		if bp.ServerBusyLo < 0.8 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: a server used only %.0f%% of its CPU in some run: the client or other processes on the machine set the pace there, which pulls the ratio towards 1 (compare CPU/request)",
				bp.Proto, 100*bp.ServerBusyLo))
		}
	}
	rep.Chart = baselineChart(protos, sched.floor)
	rep.Verdict = fmt.Sprintf("throughput ratio per protocol (median) %v, floor %.1f", worst, sched.floor)
	rep.Figures = &baselineFigures{protos, m.runs}
	return rep
}

// baselineChart draws h3edge ÷ bare per protocol, throughput (with the pairs' spread)
// and CPU per request, against the floor.
func baselineChart(protos []baselineProto, floor float64) *chart.Chart {
	ch := &chart.Chart{
		Title:  "h3edge ÷ bare server, throughput and CPU per request",
		XLabel: "protocol (whiskers: spread of interleaved pairs)",
		YLabel: "ratio",
		HLines: []chart.Marker{{At: floor, Label: fmt.Sprintf("claim floor %.1f", floor)}, {At: 1}},
	}
	thr := chart.Series{Name: "throughput ratio"}
	cpu := chart.Series{Name: "CPU/request ratio"}
	for _, bp := range protos {
		ch.Categories = append(ch.Categories, string(bp.Proto))
		thr.Y, thr.Low, thr.High = append(thr.Y, bp.Median), append(thr.Low, bp.Min), append(thr.High, bp.Max)
		cpu.Y = append(cpu.Y, bp.CPURatio)
	}
	ch.Series = []chart.Series{thr, cpu}
	return ch
}

func okMark(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
