package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench"
)

// baselineMeasured is what measureBaseline saw: every run, and per protocol the
// pairs' figures.
type baselineMeasured struct {
	runs   []baselineRun
	series []baselineSeries
	// notes name the runs that had errors or a status other than 200.
	notes []string
	// edgePeak and barePeak are the servers' peak RSS; 0 if unknown.
	edgePeak, barePeak int64
}

// baselineSeries is one protocol's pairs: h3edge ÷ bare per pair, each server's
// throughput and CPU per request per pair, and the lowest CPU busy share of any run.
type baselineSeries struct {
	proto                              bench.Proto
	ratios                             []float64
	edgeRPS, bareRPS, edgeCPU, bareCPU []float64
	busyLo                             float64
}

// baselineSample is one server's run in a pair.
type baselineSample struct {
	run  baselineRun
	res  *bench.Result
	busy float64
	err  error
}

// baselineServers names the two servers, in the order of each pair.
var baselineServers = []string{"h3edge", "bare"}

// measureBaseline starts h3edge and the bare server and measures, per protocol, pairs
// of runs as the schedule says (one after the other, or side by side), then reads
// the servers' peak memory.
func measureBaseline(ctx context.Context, e *env, sched baselineSchedule) (*baselineMeasured, error) {
	edge, err := e.startH3edge(ctx, "h3edge", ipLimitsRaised+abuseOff)
	if err != nil {
		return nil, err
	}
	bare, err := e.startBare(ctx, "bare")
	if err != nil {
		return nil, err
	}
	servers := []*server{edge, bare}
	m := &baselineMeasured{}
	for _, load := range baselineLoads {
		bs := baselineSeries{proto: load.proto, busyLo: 1e9}
		for pair := 0; sched.another(pair, bs.ratios); pair++ {
			var got [2]baselineSample
			if sched.sideBySide {
				var wg sync.WaitGroup
				for i, srv := range servers {
					wg.Go(func() { got[i] = measureBaselineRun(ctx, sched, load, srv, baselineServers[i], pair) })
				}
				wg.Wait()
			} else {
				for i, srv := range servers { // A B A B …
					got[i] = measureBaselineRun(ctx, sched, load, srv, baselineServers[i], pair)
				}
			}
			var rps [2]float64
			for i := range servers {
				g := &got[i]
				if g.err != nil {
					return nil, g.err
				}
				busy := g.busy
				if sched.sideBySide {
					busy = got[0].busy + got[1].busy // the two share CPU 0
				}
				bs.busyLo = min(bs.busyLo, busy)
				m.runs = append(m.runs, g.run)
				if g.run.Errors > 0 || g.res.Status[200] != g.res.Responses {
					m.notes = append(m.notes, fmt.Sprintf("%s %s pair %d: %d errors, status %v",
						baselineServers[i], load.proto, pair+1, g.run.Errors, g.res.Status))
				}
				rps[i] = g.run.RequestsPerSecond
				if i == 0 {
					bs.edgeRPS, bs.edgeCPU = append(bs.edgeRPS, g.run.RequestsPerSecond), append(bs.edgeCPU, g.run.CPUPerRequestUs)
				} else {
					bs.bareRPS, bs.bareCPU = append(bs.bareRPS, g.run.RequestsPerSecond), append(bs.bareCPU, g.run.CPUPerRequestUs)
				}
				e.logf("%s %s pair %d: %.0f req/s, %.1f µs CPU/request", baselineServers[i], load.proto, pair+1, g.run.RequestsPerSecond, g.run.CPUPerRequestUs)
			}
			if rps[1] > 0 {
				bs.ratios = append(bs.ratios, rps[0]/rps[1])
			}
		}
		if len(bs.ratios) == 0 {
			return nil, fmt.Errorf("bench: baseline %s: the bare server answered nothing", load.proto)
		}
		m.series = append(m.series, bs)
	}
	if _, peak, err := ProcessMemory(edge.pid()); err == nil {
		m.edgePeak = peak
	}
	if _, peak, err := ProcessMemory(bare.pid()); err == nil {
		m.barePeak = peak
	}
	return m, nil
}

// measureBaselineRun loads srv (named name) with one protocol's load for one run of
// the schedule and reads its CPU around the run.
func measureBaselineRun(ctx context.Context, sched baselineSchedule, load baselineLoad, srv *server, name string, pair int) baselineSample {
	var m baselineSample
	if m.err = srv.alive(); m.err != nil {
		return m
	}
	cpu0, err := srv.cpu()
	if err != nil {
		m.err = err
		return m
	}
	res, err := runLoad(ctx, bench.Config{
		URL: srv.url("/"), Proto: load.proto, Connections: load.conns, Streams: load.streams,
		Duration: sched.dur, Warmup: sched.warm, Timeout: 5 * time.Second, Pins: []string{srv.pin},
	})
	if err != nil {
		m.err = err
		return m
	}
	cpu1, err := srv.cpu()
	if err != nil {
		m.err = err
		return m
	}
	// The CPU counter covers warm-up and measurement alike: divide by every request
	// of the run, estimated at the measured rate.
	total := res.RequestsPerSecond * (sched.warm + res.Duration).Seconds()
	cpuPer := 0.0
	if total > 0 {
		cpuPer = float64(cpu1-cpu0) / float64(time.Microsecond) / total
	}
	var errs int64
	for _, n := range res.Errors {
		errs += n
	}
	m.res, m.busy = res, (cpu1-cpu0).Seconds()/(sched.warm+res.Duration).Seconds()
	m.run = baselineRun{
		Server: name, Proto: load.proto, Pair: pair + 1,
		RequestsPerSecond: res.RequestsPerSecond, Requests: res.Requests, Errors: errs,
		P99Us: res.Latency.P99.Microseconds(), CPUPerRequestUs: cpuPer, CPUBusy: m.busy,
	}
	return m
}
