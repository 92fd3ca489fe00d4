package scenario

import (
	"context"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench"
)

// noisyRun holds the servers of a run and what each phase measured, in the order of
// the schedule.
type noisyRun struct {
	e       *env
	sched   noisySchedule
	servers map[string]*server // by noisyStep.target
	phases  []noisyPhase
}

// measureNoisy starts the servers the schedule's phases name, in the order they are
// first needed, and measures every phase in turn.
func measureNoisy(ctx context.Context, e *env, sched noisySchedule) (*noisyRun, error) {
	r := &noisyRun{e: e, sched: sched, servers: make(map[string]*server)}
	for _, st := range sched.steps {
		if r.servers[st.target] != nil {
			continue
		}
		var s *server
		var err error
		switch st.target {
		case noisyBare:
			s, err = e.startBare(ctx, noisyBare)
		case noisyNoBox:
			s, err = e.startH3edge(ctx, noisyNoBox, abuseOff+noisyPolicy)
		default:
			s, err = e.startH3edge(ctx, noisyEdge, noisyPolicy)
		}
		if err != nil {
			return nil, err
		}
		r.servers[st.target] = s
	}
	for _, st := range sched.steps {
		p, err := r.measure(ctx, st)
		if err != nil {
			return nil, err
		}
		r.phases = append(r.phases, p)
	}
	return r, nil
}

// remeasure measures again every phase whose server is labelled label.
func (r *noisyRun) remeasure(ctx context.Context, label string) error {
	for i, st := range r.sched.steps {
		if st.label != label {
			continue
		}
		p, err := r.measure(ctx, st)
		if err != nil {
			return err
		}
		r.phases[i] = p
	}
	return nil
}

// measure runs one phase: the legitimate clients and, if the phase says so, the
// attacker, at the same time against the phase's server, whose CPU it reads around
// the run.
func (r *noisyRun) measure(ctx context.Context, st noisyStep) (noisyPhase, error) {
	srv, sched := r.servers[st.target], r.sched
	if err := srv.alive(); err != nil {
		return noisyPhase{}, err
	}
	// The clients run in this process: collect what the previous phase left (the
	// unprotected attack's 300 MB of 4 KB bodies) before measuring, not during.
	runtime.GC()
	cpu0, err := srv.cpu()
	if err != nil {
		return noisyPhase{}, err
	}
	var lres, ares *bench.Result
	var lerr, aerr error
	var wg sync.WaitGroup
	wg.Go(func() {
		lres, lerr = runLoad(ctx, bench.Config{
			URL: srv.url("/"), Proto: bench.H3, Connections: len(sched.legit), Streams: 4,
			Rate: sched.legitRate, Duration: sched.dur, Warmup: sched.warm, Timeout: 2 * time.Second,
			Sources: sched.legit, Pins: []string{srv.pin},
		})
	})
	if st.attack {
		wg.Go(func() {
			ares, aerr = runLoad(ctx, bench.Config{
				URL: srv.url(noisyAttackPath), Proto: bench.H3, Connections: 4, Streams: 64,
				Rate: sched.attackRate, Duration: sched.dur, Warmup: sched.warm, Timeout: 2 * time.Second,
				Sources: []netip.Addr{noisyAttacker}, Pins: []string{srv.pin},
			})
		})
	}
	wg.Wait()
	if lerr != nil {
		return noisyPhase{}, lerr
	}
	if aerr != nil {
		return noisyPhase{}, aerr
	}
	cpu1, err := srv.cpu()
	if err != nil {
		return noisyPhase{}, err
	}
	np := noisyPhase{
		Phase: st.phase, Server: st.label, Attack: st.attack,
		LegitSent: lres.Requests, LegitOK: lres.Status[200],
		LegitP50us: lres.Latency.P50.Microseconds(), LegitP99us: lres.Latency.P99.Microseconds(),
		LegitMaxus: lres.Latency.Max.Microseconds(),
		ServerBusy: (cpu1 - cpu0).Seconds() / (sched.warm + sched.dur).Seconds(),
	}
	if np.LegitSent > 0 {
		np.LegitSuccess = float64(np.LegitOK) / float64(np.LegitSent)
	}
	if ares != nil {
		np.AttackSent, np.AttackOK, np.Attack429 = ares.Requests, ares.Status[200], ares.Status[429]
		np.AttackErrors, np.AttackUnsent = ares.Errors, ares.Unsent
		offered := ares.Requests + ares.Unsent
		np.AttackShare = float64(offered) / float64(offered+lres.Requests+lres.Unsent)
	}
	r.e.logf("%s: legit %.2f%% ok, p99 %v; attacker %d requests", st.phase, 100*np.LegitSuccess, lres.Latency.P99, np.AttackSent)
	return np, nil
}
