package scenario

import (
	"fmt"
	"slices"
	"strings"
)

// dropAnalysis is what analyseDropCost made of the rounds: each layer summarized,
// and the claim's findings.
type dropAnalysis struct {
	results []*dropResult
	byKey   map[string]*dropResult
	// held and failed are the verdict's findings: the claim holds when failed is empty.
	held, failed []string
}

// analyseDropCost summarizes each layer over its rounds (median CPU per unit, spread,
// rate, busy share), compares it with its reference full 429, and checks the claim:
// the datagram against the full 429 on its own transport (h3), and the chain of
// layers, each at most slack × the next, which is reported, not claimed.
func analyseDropCost(sched dropSchedule, results []*dropResult) (*dropAnalysis, error) {
	a := &dropAnalysis{results: results, byKey: make(map[string]*dropResult)}
	for _, r := range results {
		var per []float64
		var units, cpu, secs float64
		for _, rd := range r.Rounds {
			per = append(per, rd.PerUnitUs)
			units, cpu, secs = units+rd.Units, cpu+rd.CPUms, secs+rd.Seconds
		}
		if units == 0 {
			return nil, fmt.Errorf("bench: drop-cost %s: h3edge counted no refused unit (%s); client saw %v",
				r.Key, strings.Join(r.Series, " + "), r.Rounds[0].Client.Outcomes)
		}
		r.PerUnitUs, r.LowUs, r.HighUs = median(per), slices.Min(per), slices.Max(per)
		r.UnitsPerSec, r.ServerBusy = units/secs, cpu/1000/secs
		a.byKey[r.Key] = r
	}
	for _, r := range results {
		if ref := a.byKey[r.Ref]; ref != nil && r.PerUnitUs > 0 {
			r.RefPerUnitUs = ref.PerUnitUs
			r.Cheaper = ref.PerUnitUs / r.PerUnitUs
		}
	}

	type check struct {
		lo, hi string
		orEq   bool
	}
	chain := []check{
		{"datagram", "quic", false}, {"datagram", "tcp", false},
		{"quic", "stream", false}, {"tcp", "stream", false},
		{"stream", "prebuilt", false}, {"prebuilt", "full-h2", true},
	}
	dg := a.byKey["datagram"]
	if dg.Cheaper >= sched.factor {
		bound := ""
		if allBelow(dg.Rounds) {
			bound = "at least "
		}
		a.held = append(a.held, fmt.Sprintf("datagram %s%.0f× cheaper than a full 429 (≥ %.0f×)", bound, dg.Cheaper, sched.factor))
	} else {
		a.failed = append(a.failed, fmt.Sprintf("datagram only %.1f× cheaper than a full 429 (want ≥ %.0f×)", dg.Cheaper, sched.factor))
	}
	for _, c := range chain {
		lo, hi := a.byKey[c.lo], a.byKey[c.hi]
		op := "<"
		ok := lo.PerUnitUs < sched.slack*hi.PerUnitUs
		if c.orEq {
			op, ok = "≤", lo.PerUnitUs <= sched.slack*hi.PerUnitUs
		}
		s := fmt.Sprintf("%s %.2f µs %s %s %.2f µs", lo.Name, lo.PerUnitUs, op, hi.Name, hi.PerUnitUs)
		if sched.slack != 1 {
			s += fmt.Sprintf(" (×%.2f)", sched.slack)
		}
		// The order of the layers is reported, not claimed: a refused QUIC
		// connection costs key derivation and a TCP reset kernel work that a refused
		// stream on an open connection does not.
		if ok {
			a.held = append(a.held, s)
		} else {
			a.held = append(a.held, "NOT "+s+" (reported)")
		}
	}
	return a, nil
}

// allBelow reports whether every round used less than one clock tick: the per-unit
// figures are upper bounds and the ratio a lower bound.
func allBelow(rs []dropRound) bool {
	for _, r := range rs {
		if !r.Below {
			return false
		}
	}
	return len(rs) > 0
}
