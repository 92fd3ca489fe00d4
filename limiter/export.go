package limiter

// This file exports what a Store kept outside this package (limiter/redisstore) needs
// to mirror the step functions decision for decision: a policy's derived parameters,
// the per-key state and the step itself.

// Params are a policy's derived parameters, the exact integers its step function
// counts with (see step.go).
type Params struct {
	// ID identifies the policy's state: a hash of its name and parameters, so a policy
	// whose parameters change gets another ID.
	ID uint64
	// Tick is the unit of time of the bucket family and sliding_window, in ns.
	Tick int64
	// PerTick and PerUnit (bucket family): one tick drains PerTick units of backlog;
	// one unit of quota is PerUnit units.
	PerTick, PerUnit int64
	// CapUnits (token_bucket, gcra) is the capacity in units of backlog; Burst the
	// capacity in units of quota.
	CapUnits, Burst int64
	// DelayMax (leaky_bucket) is MaxDelay in units of backlog.
	DelayMax int64
	// DrainAll (bucket family) is the number of ticks after which any backlog drained.
	DrainAll int64
	// WindowTicks (sliding_window) is the window in ticks.
	WindowTicks int64
}

// Params returns p's derived parameters; ok is false if p was not made by NewPolicy.
func (p *Policy) Params() (_ Params, ok bool) {
	if p == nil || p.kind == kindInvalid {
		return Params{}, false
	}
	return Params{
		ID: p.id, Tick: p.tick, PerTick: p.perTick, PerUnit: p.perUnit,
		CapUnits: p.capUnits, Burst: p.burst, DelayMax: p.delayMax,
		DrainAll: p.drainAll, WindowTicks: p.windowTicks,
	}, true
}

// State is one key's state under one policy, the integers the step functions keep
// (see step.go); the zero State is a key never seen. A sliding_log key's state is its
// log of instants, which State does not hold.
type State struct {
	T, N, P int64
}

// Step decides cost units at instant now (ns) for a key in state *s exactly as Local
// does: it writes the verdict to *d and advances *s to the state to store if the
// request is charged. It counts nothing (see Record). It must not be called for a
// SlidingLog policy, except with the zero State.
func (p *Policy) Step(s *State, now, cost int64, d *Decision) {
	st := state{t: s.T, n: s.N, p: s.P}
	p.step(&st, nil, now, cost, d)
	*s = State{T: st.t, N: st.n, P: st.p}
}
