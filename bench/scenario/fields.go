package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
	"github.com/h3edge/h3edge/bench/testkit"
)

const claimFields = "clients that respect the RateLimit fields (-respect-limits) make h3edge build at most 10% of the 429s that clients ignoring them cause, for at least 80% of their successful throughput, and every response's fields parse and agree with what the clients saw"

// The fields scenario: one policy, two groups of clients offering the same load.
const (
	fieldsQuota    = 10
	fieldsWindow   = time.Second
	fieldsClients  = 5
	fieldsOffered  = 40 // requests per second per client, 4× the quota
	fields429Share = 0.10
	fieldsOKShare  = 0.80
)

// fieldsGroup is one group's run.
type fieldsGroup struct {
	Group       string  `json:"group"`
	Sources     string  `json:"sources"`
	Handled     int64   `json:"requests_handled"`
	OK          int64   `json:"ok"`
	Denied      int64   `json:"denied_429"`
	Errors      int64   `json:"errors"`
	Seconds     float64 `json:"seconds"`
	OKPerSecond float64 `json:"ok_per_second"`
	// DeniedPerOK is the 429s the server built per successful request.
	DeniedPerOK float64 `json:"denied_per_ok"`
	// ServerCPUus is h3edge's CPU time over the group's run; per successful request in
	// CPUPerOKus.
	ServerCPUus float64             `json:"server_cpu_us"`
	CPUPerOKus  float64             `json:"server_cpu_per_ok_us"`
	Fields      bench.FieldStats    `json:"fields"`
	Respect     *bench.RespectStats `json:"respect,omitempty"`
}

func runFields(ctx context.Context, e *env) (*Report, error) {
	// Each group runs whole windows, starting just after a boundary (fixed windows are
	// aligned to the Unix epoch): then both groups can use every window's quota, and the
	// comparison is not decided by a partial window at either end.
	windows := 10
	if e.opt.Short {
		windows = 3
	}
	dur := time.Duration(windows)*fieldsWindow - 100*time.Millisecond
	cfg := ipLimitsRaised + abuseOff + fmt.Sprintf(`policies:
  - {name: api, key: [ip], algorithm: fixed_window, quota: %d, window: %v}
`, fieldsQuota, fieldsWindow)
	edge, err := e.startH3edge(ctx, "h3edge", cfg)
	if err != nil {
		return nil, err
	}
	groups := []struct {
		name    string
		sources string
		respect bool
	}{
		{"respecting", "127.0.0.2-127.0.0.6", true},
		{"ignoring", "127.0.0.7-127.0.0.11", false},
	}
	var out []fieldsGroup
	for _, g := range groups {
		srcs, err := bench.ParseSources(g.sources)
		if err != nil {
			return nil, err
		}
		if !sleep(ctx, time.Until(testkit.NextPhase(time.Now().Add(50*time.Millisecond), fieldsWindow, 0.05))) {
			return nil, context.Cause(ctx)
		}
		cpu0, err := edge.cpu()
		if err != nil {
			return nil, err
		}
		res, err := runLoad(ctx, bench.Config{
			URL: edge.url("/api/x"), Proto: bench.H3, Connections: fieldsClients, Streams: 2,
			Rate: fieldsClients * fieldsOffered, Duration: dur, Timeout: 2 * time.Second,
			Sources: srcs, Pins: []string{edge.pin}, RespectLimits: g.respect,
		})
		if err != nil {
			return nil, err
		}
		cpu1, err := edge.cpu()
		if err != nil {
			return nil, err
		}
		fg := fieldsGroup{
			Group: g.name, Sources: g.sources, Handled: res.Responses, OK: res.Status[200],
			// Per second over the run's set duration: respecting clients may end early,
			// held back by the fields, and that is part of what they cost.
			Denied: res.Status[429], Errors: res.Requests - res.Responses, Seconds: dur.Seconds(),
			ServerCPUus: float64(cpu1-cpu0) / float64(time.Microsecond),
			Fields:      res.Fields, Respect: res.Respect,
		}
		if fg.Seconds > 0 {
			fg.OKPerSecond = float64(fg.OK) / fg.Seconds
		}
		if fg.OK > 0 {
			fg.DeniedPerOK = float64(fg.Denied) / float64(fg.OK)
			fg.CPUPerOKus = fg.ServerCPUus / float64(fg.OK)
		}
		e.logf("%s: %d handled, %d ok, %d × 429, %.1f ok/s", g.name, fg.Handled, fg.OK, fg.Denied, fg.OKPerSecond)
		out = append(out, fg)
	}
	resp, ign := out[0], out[1]
	rep := &Report{}
	fewer := float64(resp.Denied) <= fields429Share*float64(ign.Denied)
	similar := resp.OKPerSecond >= fieldsOKShare*ign.OKPerSecond
	consistent := true
	for _, g := range out {
		consistent = consistent && g.Fields.Inconsistent == 0 && g.Fields.Present == g.Handled && g.Fields.Parsed == g.Handled
	}
	rep.Holds = fewer && similar && consistent
	share := 0.0
	if ign.Denied > 0 {
		share = float64(resp.Denied) / float64(ign.Denied)
	}
	rep.Verdict = fmt.Sprintf("respecting clients caused %d × 429 against %d (%.1f%%, limit %.0f%%) for %.1f ok/s against %.1f (%.0f%%, floor %.0f%%); fields consistent: %v",
		resp.Denied, ign.Denied, 100*share, 100*fields429Share, resp.OKPerSecond, ign.OKPerSecond,
		100*resp.OKPerSecond/max(ign.OKPerSecond, 1e-9), 100*fieldsOKShare, consistent)
	rep.Table = [][]string{{"group", "handled", "200", "429", "429 per 200", "200/s", "server CPU/200", "fields present/parsed/inconsistent"}}
	for _, g := range out {
		rep.Table = append(rep.Table, []string{
			g.Group, fmt.Sprint(g.Handled), fmt.Sprint(g.OK), fmt.Sprint(g.Denied), fmt.Sprintf("%.2f", g.DeniedPerOK),
			fmt.Sprintf("%.1f", g.OKPerSecond), fmt.Sprintf("%.0f µs", g.CPUPerOKus),
			fmt.Sprintf("%d/%d/%d", g.Fields.Present, g.Fields.Parsed, g.Fields.Inconsistent),
		})
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("policy fixed_window q=%d w=%v keyed by ip; %d h3 clients per group (own source each), %d req/s offered each, open loop, %v per group from 50 ms after a window boundary, groups one after the other, penalty box off; server CPU from /proc/PID/stat",
		fieldsQuota, fieldsWindow, fieldsClients, fieldsOffered, dur))
	for _, g := range out {
		for _, p := range bench.FieldProblems {
			if n := g.Fields.Problems[p]; n > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d responses with %s", g.Group, n, p))
			}
		}
	}
	if resp.Respect != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("respecting clients held %d requests back, %.1fs in all", resp.Respect.Waits, resp.Respect.Waited.Seconds()))
	}
	rep.Chart = &chart.Chart{
		Title:      "What the server handles: clients that respect RateLimit vs clients that ignore it",
		XLabel:     fmt.Sprintf("group (%d clients, %d req/s offered each, quota %d/s each)", fieldsClients, fieldsOffered, fieldsQuota),
		YLabel:     "requests per second",
		Categories: []string{"respecting", "ignoring"},
		Series: []chart.Series{
			{Name: "handled/s", Y: []float64{perSecond(resp.Handled, resp.Seconds), perSecond(ign.Handled, ign.Seconds)}},
			{Name: "200/s", Y: []float64{resp.OKPerSecond, ign.OKPerSecond}},
			{Name: "429/s", Y: []float64{perSecond(resp.Denied, resp.Seconds), perSecond(ign.Denied, ign.Seconds)}},
		},
	}
	rep.Figures = struct {
		Policy string        `json:"policy"`
		Groups []fieldsGroup `json:"groups"`
	}{fmt.Sprintf("fixed_window q=%d w=%v key=ip", fieldsQuota, fieldsWindow), out}
	return rep, nil
}

func perSecond(n int64, s float64) float64 {
	if s <= 0 {
		return 0
	}
	return float64(n) / s
}
