package scenario

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
)

const claimNoisy = "with one source sending 97% of the requests (each fetching 4 KB), h3edge with its defaults (ip: budgets, penalty box) and a per-ip policy keeps 20 legitimate clients at ≥ 99% success with their p99 latency within 1.5× of their p99 without the attacker (short mode: 2× or +2 ms)"

// The noisy-neighbour load: 20 legitimate sources at a modest open-loop rate each, and
// one source sending 97 % of all requests.
const (
	noisyLegitSources = "127.0.0.2-127.0.0.21"
	noisyLegitRate    = 15 // requests per second per legitimate client
	noisyAttackShare  = 0.97
	noisyPolicyQuota  = 100 // per ip per second: 6× a legitimate client's rate
	noisyMinSuccess   = 0.99
	noisyMaxP99Factor = 1.5
	// noisyShortFactor and noisyShortSlack are the short mode's limit: 2× the quiet p99
	// or 2 ms above it, whichever is more, since a p99 of 600 samples swings by that
	// much between two quiet runs on a shared machine.
	noisyShortFactor = 2.0
	noisyShortSlack  = 2 * time.Millisecond
	// noisyAttackPath is what the attacker fetches: 4 KB, a small resource that costs a
	// server a few packets per request (both servers answer /bytes alike).
	noisyAttackPath = "/bytes?n=4096"
)

var noisyAttacker = netip.MustParseAddr("127.0.0.100")

// noisyPhase is one run: the legitimate clients, with or without the attacker, against
// one server.
type noisyPhase struct {
	Phase        string  `json:"phase"`
	Server       string  `json:"server"`
	Attack       bool    `json:"attack"`
	LegitSent    int64   `json:"legit_requests"`
	LegitOK      int64   `json:"legit_ok"`
	LegitSuccess float64 `json:"legit_success"`
	LegitP50us   int64   `json:"legit_p50_us"`
	LegitP99us   int64   `json:"legit_p99_us"`
	LegitMaxus   int64   `json:"legit_max_us"`
	// The attacker's requests: sent and ended, answered 200 or 429, failed by kind,
	// and scheduled but never sent (its workers were stuck on refused or dropped
	// requests); AttackShare is its share of all requests scheduled.
	AttackSent   int64                     `json:"attack_requests,omitempty"`
	AttackOK     int64                     `json:"attack_ok,omitempty"`
	Attack429    int64                     `json:"attack_429,omitempty"`
	AttackErrors map[bench.ErrorKind]int64 `json:"attack_errors,omitempty"`
	AttackUnsent int64                     `json:"attack_unsent,omitempty"`
	AttackShare  float64                   `json:"attack_share,omitempty"`
	ServerBusy   float64                   `json:"server_cpu_busy"`
}

func runNoisy(ctx context.Context, e *env) (*Report, error) {
	dur, warm := 8*time.Second, time.Second
	if e.opt.Short {
		dur, warm = 2*time.Second, 300*time.Millisecond
	}
	legit, err := bench.ParseSources(noisyLegitSources)
	if err != nil {
		return nil, err
	}
	legitRate := float64(len(legit) * noisyLegitRate)
	attackRate := legitRate * noisyAttackShare / (1 - noisyAttackShare)

	policy := fmt.Sprintf(`policies:
  - {name: per-ip, key: [ip], algorithm: token_bucket, quota: %d, window: 1s}
`, noisyPolicyQuota)
	edge, err := e.startH3edge(ctx, "h3edge", policy)
	if err != nil {
		return nil, err
	}
	bare, err := e.startBare(ctx, "bare")
	if err != nil {
		return nil, err
	}
	type phase struct {
		name   string
		srv    *server
		server string
		attack bool
	}
	phases := []phase{
		{"quiet, h3edge", edge, "h3edge", false},
		{"attack, bare", bare, "bare", true},
		{"attack, h3edge", edge, "h3edge", true},
	}
	if !e.opt.Short {
		// Informative only: the bare server without the attacker, and h3edge with the
		// penalty box off, which shows what the transport budgets and the policy do
		// on their own.
		noBox, err := e.startH3edge(ctx, "h3edge-nobox", abuseOff+policy)
		if err != nil {
			return nil, err
		}
		phases = slices.Insert(phases, 1, phase{"quiet, bare", bare, "bare", false})
		phases = append(phases, phase{"attack, h3edge, no penalty box", noBox, "h3edge (abuse off)", true})
	}
	measure := func(ph phase) (noisyPhase, error) {
		if err := ph.srv.alive(); err != nil {
			return noisyPhase{}, err
		}
		// The clients run in this process: collect what the previous phase left (the
		// unprotected attack's 300 MB of 4 KB bodies) before measuring, not during.
		runtime.GC()
		cpu0, err := ph.srv.cpu()
		if err != nil {
			return noisyPhase{}, err
		}
		var lres, ares *bench.Result
		var lerr, aerr error
		var wg sync.WaitGroup
		wg.Go(func() {
			lres, lerr = runLoad(ctx, bench.Config{
				URL: ph.srv.url("/"), Proto: bench.H3, Connections: len(legit), Streams: 4,
				Rate: legitRate, Duration: dur, Warmup: warm, Timeout: 2 * time.Second,
				Sources: legit, Pins: []string{ph.srv.pin},
			})
		})
		if ph.attack {
			wg.Go(func() {
				ares, aerr = runLoad(ctx, bench.Config{
					URL: ph.srv.url(noisyAttackPath), Proto: bench.H3, Connections: 4, Streams: 64,
					Rate: attackRate, Duration: dur, Warmup: warm, Timeout: 2 * time.Second,
					Sources: []netip.Addr{noisyAttacker}, Pins: []string{ph.srv.pin},
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
		cpu1, err := ph.srv.cpu()
		if err != nil {
			return noisyPhase{}, err
		}
		np := noisyPhase{
			Phase: ph.name, Server: ph.server, Attack: ph.attack,
			LegitSent: lres.Requests, LegitOK: lres.Status[200],
			LegitP50us: lres.Latency.P50.Microseconds(), LegitP99us: lres.Latency.P99.Microseconds(),
			LegitMaxus: lres.Latency.Max.Microseconds(),
			ServerBusy: (cpu1 - cpu0).Seconds() / (warm + dur).Seconds(),
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
		e.logf("%s: legit %.2f%% ok, p99 %v; attacker %d requests", ph.name, 100*np.LegitSuccess, lres.Latency.P99, np.AttackSent)
		return np, nil
	}
	var out []noisyPhase
	for _, ph := range phases {
		np, err := measure(ph)
		if err != nil {
			return nil, err
		}
		out = append(out, np)
	}

	find := func(name string) noisyPhase {
		for _, p := range out {
			if p.Phase == name {
				return p
			}
		}
		return noisyPhase{}
	}
	quiet, attacked, unprotected := find("quiet, h3edge"), find("attack, h3edge"), find("attack, bare")
	judge := func(quiet, attacked noisyPhase) (factor, limit float64, holds bool) {
		factor = float64(attacked.LegitP99us) / float64(max(quiet.LegitP99us, 1))
		limit = noisyMaxP99Factor
		if e.opt.Short {
			limit = max(noisyShortFactor, float64(quiet.LegitP99us+noisyShortSlack.Microseconds())/float64(max(quiet.LegitP99us, 1)))
		}
		return factor, limit, attacked.LegitSuccess >= noisyMinSuccess && factor <= limit
	}
	factor, limit, holds := judge(quiet, attacked)
	var retried string
	if e.opt.Short && !holds {
		// One short pair of 600 samples is noisy (the client shares its core with the
		// attacker's machinery): measure the h3edge pair once more, as baseline does.
		retried = fmt.Sprintf("short mode re-measured the h3edge pair once; the first attempt: quiet p99 %.2f ms, attacked p99 %.2f ms (%.2f×, limit %.1f×), legitimate success %.2f%%",
			float64(quiet.LegitP99us)/1000, float64(attacked.LegitP99us)/1000, factor, limit, 100*attacked.LegitSuccess)
		for i, ph := range phases {
			if ph.server != "h3edge" {
				continue
			}
			np, err := measure(ph)
			if err != nil {
				return nil, err
			}
			out[i] = np
		}
		quiet, attacked = find("quiet, h3edge"), find("attack, h3edge")
		factor, limit, holds = judge(quiet, attacked)
	}
	rep := &Report{}
	rep.Holds = holds
	rep.Verdict = fmt.Sprintf("under attack, h3edge kept legitimate success at %.2f%% (floor %.0f%%) and p99 at %.2f ms = %.2f× the quiet p99 of %.2f ms (limit %.1f×); without protection: %.2f%% and %.2f ms",
		100*attacked.LegitSuccess, 100*noisyMinSuccess, float64(attacked.LegitP99us)/1000, factor,
		float64(quiet.LegitP99us)/1000, limit, 100*unprotected.LegitSuccess, float64(unprotected.LegitP99us)/1000)
	rep.Table = [][]string{{"phase", "legit ok", "legit p50", "legit p99", "legit max", "attacker sent", "200/429/reset/timeout/other", "unsent", "attack share", "server CPU"}}
	ch := &chart.Chart{
		Title:  "Legitimate clients' latency with and without a noisy neighbour",
		XLabel: "phase",
		YLabel: "latency of legitimate requests (ms)",
	}
	p50 := chart.Series{Name: "legit p50"}
	p99 := chart.Series{Name: "legit p99"}
	for _, p := range out {
		attack, unsent := "-", "-"
		if p.Attack {
			ae := p.AttackErrors
			attack = fmt.Sprintf("%d/%d/%d/%d/%d", p.AttackOK, p.Attack429, ae[bench.ErrReset], ae[bench.ErrTimeout], ae[bench.ErrRefused]+ae[bench.ErrTLS]+ae[bench.ErrOther])
			unsent = fmt.Sprint(p.AttackUnsent)
		}
		rep.Table = append(rep.Table, []string{
			p.Phase, fmt.Sprintf("%.2f%%", 100*p.LegitSuccess),
			ms(time.Duration(p.LegitP50us) * time.Microsecond), ms(time.Duration(p.LegitP99us) * time.Microsecond),
			ms(time.Duration(p.LegitMaxus) * time.Microsecond),
			fmt.Sprint(p.AttackSent), attack, unsent, fmt.Sprintf("%.1f%%", 100*p.AttackShare), fmt.Sprintf("%.0f%%", 100*p.ServerBusy),
		})
		ch.Categories = append(ch.Categories, p.Phase)
		p50.Y = append(p50.Y, float64(p.LegitP50us)/1000)
		p99.Y = append(p99.Y, float64(p.LegitP99us)/1000)
	}
	ch.Series = []chart.Series{p50, p99}
	ch.HLines = []chart.Marker{{At: limit * float64(quiet.LegitP99us) / 1000, Label: fmt.Sprintf("%.1f× quiet p99", limit)}}
	rep.Chart = ch
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("legitimate: %d h3 clients (%s) fetching /, %d req/s each, open loop; attacker: %v fetching %s, 4 connections × 64 streams, open loop at %.0f req/s; %v warm-up + %v per phase",
			len(legit), noisyLegitSources, noisyLegitRate, noisyAttacker, noisyAttackPath, attackRate, warm, dur),
		fmt.Sprintf("h3edge: default ip: budgets (streams 200/s, burst 400 per source) and penalty box (50 rejections in 10s: banned, datagrams dropped), policy per-ip token_bucket %d/s; bare: no protection", noisyPolicyQuota),
		"attack share counts the requests the attacker scheduled, sent or not (unsent: its workers were stuck on dropped or refused requests when the phase ended)",
		"latency is measured from each request's intended send time (no coordinated omission), in the same client process as the attacker")
	if e.opt.Short {
		rep.Notes = append(rep.Notes, fmt.Sprintf("short mode allows %.0f× or %v above the quiet p99 instead of %.1f×: the p99 of 600 samples swings that much between quiet runs here",
			noisyShortFactor, noisyShortSlack, noisyMaxP99Factor))
	}
	if retried != "" {
		rep.Remeasured = true
		rep.Notes = append(rep.Notes, retried)
	}

	rep.Figures = struct {
		LegitRate  float64      `json:"legit_rate"`
		AttackRate float64      `json:"attack_rate"`
		Phases     []noisyPhase `json:"phases"`
		P99Factor  float64      `json:"p99_factor"`
	}{legitRate, attackRate, out, factor}
	return rep, nil
}
