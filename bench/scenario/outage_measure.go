package scenario

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/h3edge/h3edge/bench"
)

// outageRun is what measureOutage saw: every request of the load, when each stage of
// the schedule ended, and what the edges logged.
type outageRun struct {
	short      bool
	sources    int
	start, end time.Time
	// ends[i] is when stage i ended: when its fault took effect (the restarted server
	// was ready), or, for the last, the scheduled end.
	ends []time.Time
	// restarted is when the restart began (ends[stageKilled] is when it was ready).
	restarted time.Time
	recs      []fleetRecord
	// breakers are each edge's circuit-breaker transitions; panics the edges that
	// logged a panic or a fatal error.
	breakers [][]string
	panics   []string
}

// from and to bound stage i.
func (r *outageRun) from(i int) time.Time {
	if i == 0 {
		return r.start
	}
	return r.ends[i-1]
}

func (r *outageRun) to(i int) time.Time { return r.ends[i] }

// at is t as seconds from the start.
func (r *outageRun) at(t time.Time) float64 { return t.Sub(r.start).Seconds() }

// measureOutage starts one redis-server and the edges, runs the open-loop load over
// the whole schedule (short or full) while the faults happen to Redis on time, and
// collects the records and the edges' logs.
func measureOutage(ctx context.Context, e *env, short bool) (*outageRun, error) {
	sources, err := bench.ParseSources(outageSources)
	if err != nil {
		return nil, err
	}
	node, err := e.startRedisNode(ctx, "redis", 0)
	if err != nil {
		return nil, err
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "redis: {url: redis://%s/0, timeout: %v}\nkeys: {secret: %s}\n", node.addr(), outageTimeout, outageSecret)
	cfg.WriteString(ipLimitsRaised + abuseOff + "policies:\n")
	for _, m := range outageModes {
		fmt.Fprintf(&cfg, "  - {name: %s, match: {path_prefix: /%s/}, key: [header:X-API-Key], algorithm: token_bucket, quota: %d, window: %v, on_store_failure: %s}\n",
			m, m, outageQuota, outageWindow, m)
	}
	var edges []*server
	for i := range outageEdges {
		s, err := e.startH3edge(ctx, fmt.Sprintf("h3edge-%d", i+1), cfg.String())
		if err != nil {
			return nil, err
		}
		edges = append(edges, s)
	}
	load := &fleetLoad{
		edges: edges, sources: sources, streams: outageStreams, apiKey: outageKey,
		rate: outageRate * float64(len(outageModes)), timeout: 2 * time.Second,
	}
	for _, m := range outageModes {
		load.paths = append(load.paths, "/"+m+"/x")
	}
	if err := load.connect(ctx); err != nil {
		return nil, err
	}
	defer load.close()

	r := &outageRun{short: short, sources: len(sources), start: time.Now().Add(200 * time.Millisecond)}
	r.end = r.start.Add(scheduleLength(short))
	var loadErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.recs, loadErr = load.run(ctx, r.start, r.end)
	}()
	ferr := e.applyFaults(ctx, node, r)
	<-done
	if ferr != nil {
		return nil, ferr
	}
	if loadErr != nil {
		return nil, loadErr
	}
	for _, s := range edges {
		r.breakers = append(r.breakers, breakerLog(s.out.String(), r.start))
		if err := s.alive(); err != nil {
			return nil, err
		}
		if out := s.out.String(); strings.Contains(out, "panic:") || strings.Contains(out, "fatal error:") {
			r.panics = append(r.panics, s.name)
		}
	}
	return r, nil
}

// applyFaults walks the schedule: at the scheduled end of each stage it applies the
// stage's fault to node and records in r when it took effect. A node left stopped
// (the context ended during SIGSTOP) is continued before it returns.
func (e *env) applyFaults(ctx context.Context, node *redisNode, r *outageRun) error {
	stopped := false
	defer func() {
		if stopped {
			_ = node.signal(syscall.SIGCONT)
		}
	}()
	at := r.start
	for _, st := range outageSchedule {
		at = at.Add(st.length(r.short))
		if st.end == faultNone {
			r.ends = append(r.ends, at)
			break
		}
		if !sleep(ctx, time.Until(at)) {
			return context.Cause(ctx)
		}
		var err error
		switch st.end {
		case faultKill:
			err = node.signal(syscall.SIGKILL)
			r.ends = append(r.ends, time.Now())
			if err == nil {
				<-node.p.done
				e.logf("redis killed at +%.3fs", r.at(r.ends[len(r.ends)-1]))
			}
		case faultRestart:
			r.restarted = time.Now()
			err = e.restartRedis(ctx, node)
			r.ends = append(r.ends, time.Now())
			if err == nil {
				e.logf("redis restarted at +%.3fs, ready after %v", r.at(r.restarted), r.ends[len(r.ends)-1].Sub(r.restarted).Round(time.Millisecond))
			}
		case faultStop:
			err = node.signal(syscall.SIGSTOP)
			r.ends = append(r.ends, time.Now())
			stopped = err == nil
		case faultCont:
			err = node.signal(syscall.SIGCONT)
			r.ends = append(r.ends, time.Now())
			if err == nil {
				stopped = false
				e.logf("redis stopped at +%.3fs, continued at +%.3fs", r.at(r.ends[len(r.ends)-2]), r.at(r.ends[len(r.ends)-1]))
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// breakerLog lists the transitions of the quota store's circuit breaker that an edge
// logged ("quota store circuit open" and "… closed", text log format), as seconds from
// start.
func breakerLog(out string, start time.Time) []string {
	var ev []string
	for line := range strings.SplitSeq(out, "\n") {
		var state string
		switch {
		case strings.Contains(line, `msg="quota store circuit open"`):
			state = "open"
		case strings.Contains(line, `msg="quota store circuit closed"`):
			state = "closed"
		default:
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		ev = append(ev, fmt.Sprintf("%s at +%.3fs", state, t.Sub(start).Seconds()))
	}
	return ev
}
