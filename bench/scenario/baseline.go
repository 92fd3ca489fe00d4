package scenario

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
)

const claimBaseline = "h3edge (demo origin, no policies, ip: limits raised) keeps at least 0.9 of a bare quic-go/net/http server's throughput with the same handler, per protocol (median of interleaved pairs; short mode: 0.7)"

// Floors of the baseline claim: full mode, and short mode, whose one pair of sub-second
// runs on a shared machine swings too much for 0.9.
const (
	baselineFloor      = 0.9
	baselineShortFloor = 0.7
)

// baselineLoad is the load per protocol, as in notes/interop.md: HTTP/3 and HTTP/2 16
// connections × 16 streams, HTTP/1.1 64 connections.
var baselineLoad = []struct {
	proto   bench.Proto
	conns   int
	streams int
}{
	{bench.H3, 16, 16},
	{bench.H2, 16, 16},
	{bench.H1, 64, 1},
}

// baselineRun is one measured run against one server.
type baselineRun struct {
	Server            string      `json:"server"`
	Proto             bench.Proto `json:"proto"`
	Pair              int         `json:"pair"`
	RequestsPerSecond float64     `json:"requests_per_second"`
	Requests          int64       `json:"requests"`
	Errors            int64       `json:"errors"`
	P99Us             int64       `json:"p99_us"`
	// CPUPerRequestUs is the server's CPU time (user + system, /proc/PID/stat) over the
	// run divided by the requests; CPUBusy is that CPU time over the run's wall time.
	CPUPerRequestUs float64 `json:"cpu_per_request_us"`
	CPUBusy         float64 `json:"cpu_busy"`
}

// baselineProto summarizes one protocol: h3edge ÷ bare per pair.
type baselineProto struct {
	Proto        bench.Proto `json:"proto"`
	Ratios       []float64   `json:"ratios"`
	Median       float64     `json:"median"`
	Min          float64     `json:"min"`
	Max          float64     `json:"max"`
	EdgeRPS      float64     `json:"edge_rps_median"`
	BareRPS      float64     `json:"bare_rps_median"`
	EdgeCPUus    float64     `json:"edge_cpu_per_request_us_median"`
	BareCPUus    float64     `json:"bare_cpu_per_request_us_median"`
	CPURatio     float64     `json:"cpu_per_request_ratio"`
	Floor        float64     `json:"floor"`
	Holds        bool        `json:"holds"`
	EdgePeakRSS  int64       `json:"edge_peak_rss_bytes"`
	BarePeakRSS  int64       `json:"bare_peak_rss_bytes"`
	ServerBusyLo float64     `json:"server_cpu_busy_min"`
}

func runBaseline(ctx context.Context, e *env) (*Report, error) {
	pairs, warm, dur := 4, 400*time.Millisecond, 1400*time.Millisecond
	floor := baselineFloor
	// Short mode measures one pair per protocol, the two servers side by side (both on
	// CPU 0, loaded at the same time, so that both meet the same machine: this VM's
	// speed swings within a second, and A-then-B sub-second runs scatter by ±30 %); a
	// protocol whose pair falls under the floor gets up to four more while the time
	// budget lasts, and is judged by the median.
	maxPairs, retryUntil, sideBySide := pairs, time.Time{}, false
	if e.opt.Short {
		pairs, warm, dur, floor = 1, 250*time.Millisecond, 800*time.Millisecond, baselineShortFloor
		maxPairs, retryUntil, sideBySide = 5, time.Now().Add(7*time.Second), true
	}
	edge, err := e.startH3edge(ctx, "h3edge", ipLimitsRaised+abuseOff)
	if err != nil {
		return nil, err
	}
	bare, err := e.startBare(ctx, "bare")
	if err != nil {
		return nil, err
	}
	servers := []*server{edge, bare}
	names := []string{"h3edge", "bare"}

	var runs []baselineRun
	var protos []baselineProto
	rep := &Report{Holds: true}
	for _, load := range baselineLoad {
		bp := baselineProto{Proto: load.proto, Floor: floor}
		var edgeRPS, bareRPS, edgeCPU, bareCPU []float64
		busyLo := 1e9
		for pair := 0; pair < pairs || pair < maxPairs && median(bp.Ratios) < floor && time.Now().Before(retryUntil); pair++ {
			var rps [2]float64
			type measured struct {
				run  baselineRun
				res  *bench.Result
				busy float64
				err  error
			}
			var got [2]measured
			measure := func(i int, srv *server) {
				m := &got[i]
				if m.err = srv.alive(); m.err != nil {
					return
				}
				cpu0, err := srv.cpu()
				if err != nil {
					m.err = err
					return
				}
				res, err := runLoad(ctx, bench.Config{
					URL: srv.url("/"), Proto: load.proto, Connections: load.conns, Streams: load.streams,
					Duration: dur, Warmup: warm, Timeout: 5 * time.Second, Pins: []string{srv.pin},
				})
				if err != nil {
					m.err = err
					return
				}
				cpu1, err := srv.cpu()
				if err != nil {
					m.err = err
					return
				}
				// The CPU counter covers warm-up and measurement alike: divide by every
				// request of the run, estimated at the measured rate.
				total := res.RequestsPerSecond * (warm + res.Duration).Seconds()
				cpuPer := 0.0
				if total > 0 {
					cpuPer = float64(cpu1-cpu0) / float64(time.Microsecond) / total
				}
				var errs int64
				for _, n := range res.Errors {
					errs += n
				}
				m.res, m.busy = res, (cpu1-cpu0).Seconds()/(warm+res.Duration).Seconds()
				m.run = baselineRun{
					Server: names[i], Proto: load.proto, Pair: pair + 1,
					RequestsPerSecond: res.RequestsPerSecond, Requests: res.Requests, Errors: errs,
					P99Us: res.Latency.P99.Microseconds(), CPUPerRequestUs: cpuPer, CPUBusy: m.busy,
				}
			}
			if sideBySide {
				var wg sync.WaitGroup
				for i, srv := range servers {
					wg.Go(func() { measure(i, srv) })
				}
				wg.Wait()
			} else {
				for i, srv := range servers { // A B A B …
					measure(i, srv)
				}
			}
			for i := range servers {
				m := &got[i]
				if m.err != nil {
					return nil, m.err
				}
				busy := m.busy
				if sideBySide {
					busy = got[0].busy + got[1].busy // the two share CPU 0
				}
				busyLo = min(busyLo, busy)
				runs = append(runs, m.run)
				if m.run.Errors > 0 || m.res.Status[200] != m.res.Responses {
					rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s pair %d: %d errors, status %v",
						names[i], load.proto, pair+1, m.run.Errors, m.res.Status))
				}
				rps[i] = m.run.RequestsPerSecond
				if i == 0 {
					edgeRPS, edgeCPU = append(edgeRPS, m.run.RequestsPerSecond), append(edgeCPU, m.run.CPUPerRequestUs)
				} else {
					bareRPS, bareCPU = append(bareRPS, m.run.RequestsPerSecond), append(bareCPU, m.run.CPUPerRequestUs)
				}
				e.logf("%s %s pair %d: %.0f req/s, %.1f µs CPU/request", names[i], load.proto, pair+1, m.run.RequestsPerSecond, m.run.CPUPerRequestUs)
			}
			if rps[1] > 0 {
				bp.Ratios = append(bp.Ratios, rps[0]/rps[1])
			}
		}
		if len(bp.Ratios) == 0 {
			return nil, fmt.Errorf("bench: baseline %s: the bare server answered nothing", load.proto)
		}
		bp.Median, bp.Min, bp.Max = median(bp.Ratios), slices.Min(bp.Ratios), slices.Max(bp.Ratios)
		bp.EdgeRPS, bp.BareRPS = median(edgeRPS), median(bareRPS)
		bp.EdgeCPUus, bp.BareCPUus = median(edgeCPU), median(bareCPU)
		if bp.BareCPUus > 0 {
			bp.CPURatio = bp.EdgeCPUus / bp.BareCPUus
		}
		bp.ServerBusyLo = busyLo
		bp.Holds = bp.Median >= floor
		rep.Holds = rep.Holds && bp.Holds
		protos = append(protos, bp)
	}
	for _, s := range servers {
		if _, peak, err := ProcessMemory(s.pid()); err == nil {
			for i := range protos {
				if s == edge {
					protos[i].EdgePeakRSS = peak
				} else {
					protos[i].BarePeakRSS = peak
				}
			}
		}
	}

	rep.Table = [][]string{{"proto", "h3edge req/s", "bare req/s", "ratio (median)", "spread", "h3edge CPU/req", "bare CPU/req", "CPU ratio", "floor", "ok"}}
	ch := &chart.Chart{
		Title:  "h3edge ÷ bare server, throughput and CPU per request",
		XLabel: "protocol (whiskers: spread of interleaved pairs)",
		YLabel: "ratio",
		HLines: []chart.Marker{{At: floor, Label: fmt.Sprintf("claim floor %.1f", floor)}, {At: 1}},
	}
	thr := chart.Series{Name: "throughput ratio"}
	cpu := chart.Series{Name: "CPU/request ratio"}
	var worst []string
	for _, bp := range protos {
		rep.Table = append(rep.Table, []string{
			string(bp.Proto), fmt.Sprintf("%.0f", bp.EdgeRPS), fmt.Sprintf("%.0f", bp.BareRPS),
			fmt.Sprintf("%.2f", bp.Median), fmt.Sprintf("%.2f–%.2f", bp.Min, bp.Max),
			fmt.Sprintf("%.1f µs", bp.EdgeCPUus), fmt.Sprintf("%.1f µs", bp.BareCPUus),
			fmt.Sprintf("%.2f", bp.CPURatio), fmt.Sprintf("%.1f", bp.Floor), okMark(bp.Holds),
		})
		ch.Categories = append(ch.Categories, string(bp.Proto))
		thr.Y, thr.Low, thr.High = append(thr.Y, bp.Median), append(thr.Low, bp.Min), append(thr.High, bp.Max)
		cpu.Y = append(cpu.Y, bp.CPURatio)
		worst = append(worst, fmt.Sprintf("%s %.2f", bp.Proto, bp.Median))
		if bp.ServerBusyLo < 0.8 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: a server used only %.0f%% of its CPU in some run: the client or other processes on the machine set the pace there, which pulls the ratio towards 1 (compare CPU/request)",
				bp.Proto, 100*bp.ServerBusyLo))
		}
	}
	ch.Series = []chart.Series{thr, cpu}
	rep.Chart = ch
	pairsNote := fmt.Sprintf("%d interleaved pair(s) per protocol (h3edge then bare), %v warm-up + %v each; CPU from /proc/PID/stat (10 ms ticks)", pairs, warm, dur)
	if e.opt.Short {
		pairsNote = fmt.Sprintf("%d pair(s) per protocol, the two servers side by side (both on CPU 0, loaded at once), %v warm-up + %v; CPU from /proc/PID/stat (10 ms ticks); short mode checks a looser floor (%.1f) and re-measures a protocol under it up to four times (median), since one sub-second pair is noisy", pairs, warm, dur, floor)
	}
	rep.Notes = append([]string{pairsNote}, rep.Notes...)
	rep.Verdict = fmt.Sprintf("throughput ratio per protocol (median) %v, floor %.1f", worst, floor)
	rep.Figures = struct {
		Protocols []baselineProto `json:"protocols"`
		Runs      []baselineRun   `json:"runs"`
	}{protos, runs}
	return rep, nil
}

func okMark(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
