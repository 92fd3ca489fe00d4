package scenario

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/scenario/flood"
)

// measureDropCost starts a fresh h3edge per layer, each set up (bans, connections)
// and warmed before any measurement; the rounds then visit the layers in turn, so that
// a disturbance on the shared machine hits one round of several layers rather than
// all of one. Each round reads the server's CPU and refusal counters around one flood.
func measureDropCost(ctx context.Context, e *env, sched dropSchedule) ([]*dropResult, error) {
	layers := sched.layers
	servers := make([]*server, len(layers))
	floods := make([]flood.Flooder, len(layers))
	defer func() {
		for _, f := range floods {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, l := range layers {
		s, err := e.startH3edge(ctx, "h3edge-"+l.Key, l.config)
		if err != nil {
			return nil, err
		}
		servers[i] = s
	}
	for i, l := range layers {
		f, err := setUpLayer(ctx, servers[i], l)
		if err != nil {
			return nil, err
		}
		floods[i] = f
		f.Flood(ctx, sched.warm)
	}

	results := make([]*dropResult, len(layers))
	for i, l := range layers {
		results[i] = &dropResult{dropLayer: *l}
	}
	strayBefore := make([]map[string]float64, len(layers))
	for round := range sched.rounds {
		for i, l := range layers {
			r, m0, m1, err := measureRound(ctx, servers[i], floods[i], l, sched.dur)
			if err != nil {
				return nil, err
			}
			if round == 0 {
				strayBefore[i] = m0
			}
			results[i].Rounds = append(results[i].Rounds, r)
			e.logf("%s round %d: %.0f units, %.0f ms server CPU, %.2f µs/unit; client %v", l.Key, round+1, r.Units, r.CPUms, r.PerUnitUs, r.Client.Outcomes)
			if round == sched.rounds-1 {
				results[i].Stray = stray(strayBefore[i], m1, l.Series)
			}
		}
	}
	return results, nil
}

// setUpLayer bans the layer's sources on s if the layer says so and builds its
// flooder, pinning s's certificate.
func setUpLayer(ctx context.Context, s *server, l *dropLayer) (flood.Flooder, error) {
	if l.ban {
		for _, src := range l.srcs {
			if err := banSource(ctx, s.admin, netip.PrefixFrom(src, 32), 10*time.Minute); err != nil {
				return nil, err
			}
		}
	}
	tc, err := bench.TLSConfig("localhost", nil, []string{s.pin}, false)
	if err != nil {
		return nil, err
	}
	f, err := l.build(ctx, s, tc, l)
	if err != nil {
		return nil, fmt.Errorf("bench: drop-cost %s: %w", l.Key, err)
	}
	return f, nil
}

// measureRound floods s for dur and returns the round with the metrics scraped
// before and after it.
func measureRound(ctx context.Context, s *server, f flood.Flooder, l *dropLayer, dur time.Duration) (r dropRound, m0, m1 map[string]float64, err error) {
	if err := s.alive(); err != nil {
		return r, nil, nil, err
	}
	m0, err = scrapeMetrics(ctx, s.admin)
	if err != nil {
		return r, nil, nil, err
	}
	c0, err := s.cpu()
	if err != nil {
		return r, nil, nil, err
	}
	start := time.Now()
	st := f.Flood(ctx, dur)
	// Let the server finish what is queued (socket buffers, in-flight handshakes)
	// before reading its CPU.
	sleep(ctx, 50*time.Millisecond)
	c1, err := s.cpu()
	if err != nil {
		return r, nil, nil, err
	}
	elapsed := time.Since(start)
	m1, err = scrapeMetrics(ctx, s.admin)
	if err != nil {
		return r, nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return r, nil, nil, err
	}
	var units float64
	for _, name := range l.Series {
		units += m1[name] - m0[name]
	}
	r = dropRound{Units: units, CPUms: float64(c1-c0) / float64(time.Millisecond), Seconds: elapsed.Seconds(), Client: st}
	if r.CPUms == 0 {
		// Under one tick: all we know is that it cost less than one.
		r.CPUms, r.Below = 10, true
	}
	if units > 0 {
		r.PerUnitUs = r.CPUms * 1000 / units
	}
	return r, m0, m1, nil
}

// dropStraySeries are the refusal counters watched for movement a layer did not ask
// for (a ban, a refusal at another layer).
var dropStraySeries = []string{
	`h3edge_dropped_datagrams_total{reason="banned"}`,
	`h3edge_refused_connections_total{proto="h3",reason="banned"}`,
	`h3edge_refused_connections_total{proto="h3",reason="rate"}`,
	`h3edge_refused_connections_total{proto="h3",reason="max_connections"}`,
	`h3edge_refused_connections_total{proto="tcp",reason="banned"}`,
	`h3edge_refused_connections_total{proto="tcp",reason="rate"}`,
	`h3edge_refused_connections_total{proto="tcp",reason="max_connections"}`,
	`h3edge_refused_streams_total{proto="h2",reason="rate"}`,
	`h3edge_refused_streams_total{proto="h3",reason="rate"}`,
	`h3edge_requests_total{code="429",proto="h2"}`,
	`h3edge_requests_total{code="429",proto="h3"}`,
	`h3edge_bans_total`,
}

// stray returns the watched refusal counters, other than the layer's own, that moved
// between two scrapes.
func stray(m0, m1 map[string]float64, own []string) map[string]float64 {
	var out map[string]float64
	for _, name := range dropStraySeries {
		if slices.Contains(own, name) {
			continue
		}
		if d := m1[name] - m0[name]; d != 0 {
			if out == nil {
				out = make(map[string]float64)
			}
			out[name] = d
		}
	}
	return out
}
