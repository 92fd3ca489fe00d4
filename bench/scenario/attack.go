package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/attack"
)

// Attack scenarios (h3bench attack NAME): one of bench/attack's abuses against an
// h3edge process on its defaults, while 20 legitimate clients on other loopback
// addresses keep working. The runner measures the legitimate clients without the
// attacker first (the unloaded p99), then with it, sampling h3edge's CPU and RSS and
// polling its ban list; the attacker reports what it got.

// Attack loads.
const (
	attackLegitSources = "127.0.0.2-127.0.0.21"
	// attackControlSources are the legitimate clients of the full mode's control.
	attackControlSources = "127.0.0.22-127.0.0.41"
	attackLegitRate      = 10 // requests per second per legitimate client
	// attackShortBan and attackFullBan bound the time from the attack's start to the
	// first ban of an attacking source: short mode only asserts the ban on a loaded
	// machine; full mode holds the 2 s.
	attackShortBan = 5 * time.Second
	attackFullBan  = 2 * time.Second
	// attackFullP99 is the full mode's bound on the legitimate p99, as a multiple of
	// the unloaded p99 (with attackP99Slack, the noise of a quiet p99 on loopback).
	attackFullP99  = 1.5
	attackP99Slack = 2 * time.Millisecond
	// attackMinSuccess is the legitimate success rate every mode asserts.
	attackMinSuccess = 0.95
)

// attackPlan is how the runner drives one attack and what it asserts.
type attackPlan struct {
	sources  string        // attacker sources
	conns    int           // per source; 0: the attack's default
	duration time.Duration // of the attack
	interval time.Duration // pacing of the slow attacks
	config   string        // h3edge configuration added to the defaults
	// What the outcome must show: banned (an attacking source is banned), closed
	// (the server ends every abusive connection within closeWithin), status (the
	// attacker is answered with it), rssFactor (peak RSS ÷ idle at most).
	banned      bool
	closeWithin time.Duration
	status      int
	rssFactor   float64
	// rssPerConn replaces rssFactor for the slow attacks in full mode, whose point is
	// holding connections: peak RSS above idle at most this much per connection
	// h3edge held at once (its peak of open file descriptors above idle: the pending
	// handshakes the attacker never sees complete count too). (Short mode's few dozen
	// connections are outweighed by the legitimate load's own memory: rssFactor holds
	// there.)
	rssPerConn int64
	// count and rate size quic-initial-flood: Initials, each from its own address, and
	// how many per second. Its checks: Retries come back, the handshakes h3edge begins
	// stay within retryAbove per second of the flood (plus one second's worth), and the
	// tracked sources within ip.max_tracked.
	count int
	rate  float64
	// overload: the attack is meant to push h3edge into shedding new work. The
	// attacker must be refused (503) and, once it stops and its held requests end, the
	// legitimate clients must be served again (≥ 95 %). In full mode they must also be
	// served while it lasts (≥ 95 %): each source has a share of the in-flight cap. In
	// short mode the goroutine bound, which sheds every source alike, is set low enough
	// to engage, so the legitimate success under attack is reported, not checked.
	overload bool
}

// The ip: defaults quic-initial-flood is judged against (DESIGN §4; quicconn's).
const (
	floodRetryAbove = 1000
	floodMaxTracked = 1000000
)

// slowConnRSS is what a slow client's connection may cost h3edge in RSS: a
// goroutine, the TLS connection's buffers, net/http's reader and writer.
const slowConnRSS = 128 << 10

// plan returns the attack's plan for the mode.
func plan(name string, short bool) attackPlan {
	p := attackPlan{sources: "127.0.1.1-127.0.1.10", duration: 15 * time.Second, rssFactor: 2}
	if short {
		p.sources, p.duration, p.rssFactor = "127.0.1.1-127.0.1.2", 4*time.Second, 4
	}
	switch name {
	case "rapid-reset", "made-you-reset":
		p.banned = true
	case "continuation", "hpack-bomb", "settings-flood", "ping-flood", "empty-frames":
		p.banned, p.closeWithin = true, time.Second
		if short {
			p.closeWithin = 3 * time.Second
		}
	case "slowloris":
		p.rssPerConn = slowConnRSS
		// The header timeout is fixed at 10 s: the attack outlasts it in both modes.
		p.sources, p.conns, p.duration, p.closeWithin = "127.0.2.1-127.0.2.50", 60, 15*time.Second, 11*time.Second
		if short {
			p.sources, p.conns, p.duration, p.closeWithin = "127.0.2.1-127.0.2.5", 10, 13*time.Second, 12*time.Second
		}
	case "slow-post":
		p.rssPerConn = slowConnRSS
		p.sources, p.conns, p.duration, p.closeWithin, p.status = "127.0.2.1-127.0.2.50", 60, 35*time.Second, 31*time.Second, http.StatusRequestTimeout
		if short {
			p.sources, p.conns, p.duration, p.closeWithin = "127.0.2.1-127.0.2.5", 10, 5*time.Second, 3500*time.Millisecond
			p.config = "limits: {body_read_timeout: 2s}\n"
		}
	case "slow-read":
		p.rssPerConn = slowConnRSS
		p.sources, p.conns, p.duration, p.closeWithin = "127.0.2.1-127.0.2.50", 60, 20*time.Second, 15*time.Second
		p.config = "limits: {write_timeout: 10s}\n"
		if short {
			p.sources, p.conns, p.duration, p.closeWithin = "127.0.2.1-127.0.2.5", 4, 6*time.Second, 4*time.Second
			p.config = "limits: {write_timeout: 2s}\n"
		}
	case "quic-initial-flood":
		// A million addresses from 127.64.0.0 (to 127.79.66.63), clear of every other
		// client's; 50 000 a second, so the flood lasts 20 s.
		// Memory: h3edge runs with GOGC=400, so the garbage of a million Retries may
		// take up to 5× the live heap between collections: 4× idle in full mode, 8× in
		// short mode on a loaded machine, where more handshakes begin before Retry.
		p.sources, p.count, p.rate, p.duration, p.rssFactor = "127.64.0.0", 1000000, 50000, 22*time.Second, 4
		if short {
			p.count, p.rate, p.duration, p.rssFactor = 20000, 5000, 5*time.Second, 8
		}
	case "overload":
		// 50 sources × 2 connections × 100 held requests: 10 000 wanted in flight,
		// against the in-flight cap (1 024 per core) and a goroutine bound low enough
		// for them to reach it.
		// Memory: ~1 000 held requests and their connections, and the garbage of some
		// 17 000 503s a second under GOGC=400 (9.1× idle measured in full mode).
		p.overload, p.sources, p.duration, p.rssFactor = true, "127.0.3.1-127.0.3.50", 10*time.Second, 12
		p.config = "limits: {max_goroutines: 1500}\n"
		if short {
			p.sources, p.duration, p.rssFactor = "127.0.3.1-127.0.3.5", 6*time.Second, 8
			p.config = "limits: {max_inflight_requests: 500, max_goroutines: 800}\n"
		}
	case "quic-stall":
		// Thousands of streams opened and reset in a second: quic-go's stream state
		// and the refusals' packets, with no bound of 2× claimed for them.
		p.banned, p.duration, p.rssFactor = true, 15*time.Second, 4
		if short {
			p.duration = 6 * time.Second
		}
	}
	if short {
		p.rssPerConn = 0
	}
	return p
}

// AttackNames lists the attacks h3bench attack runs.
func AttackNames() []string { return attack.Names() }

// AttackSummary returns what the named attack sends, or an error for an unknown name.
func AttackSummary(name string) (string, error) {
	a, err := attack.Lookup(name)
	if err != nil {
		return "", err
	}
	return a.Summary, nil
}

// attackFigures is the JSON of an attack report.
type attackFigures struct {
	Attack   string `json:"attack"`
	Sources  int    `json:"attacker_sources"`
	Duration string `json:"attack_duration"`
	// The legitimate clients: quiet and under attack; in full mode also those of the
	// unattacked control h3edge in the same seconds, and the attacked p99 ÷ the
	// control's under attack (side by side).
	QuietP99us        int64   `json:"legit_quiet_p99_us"`
	LegitP99us        int64   `json:"legit_p99_us"`
	P99Factor         float64 `json:"legit_p99_factor"`
	ControlQuietP99us int64   `json:"control_quiet_p99_us,omitempty"`
	ControlP99us      int64   `json:"control_p99_us,omitempty"`
	P99SideBySide     float64 `json:"legit_p99_side_by_side,omitempty"`
	LegitSuccess      float64 `json:"legit_success"`
	LegitSent         int64   `json:"legit_requests"`
	// h3edge: CPU busy share during the attack (1 = one core), RSS idle and peak.
	CPUBusy   float64 `json:"h3edge_cpu_busy"`
	IdleRSS   int64   `json:"h3edge_idle_rss_bytes"`
	PeakRSS   int64   `json:"h3edge_peak_rss_bytes"`
	RSSFactor float64 `json:"h3edge_rss_factor"`
	// Held is the most connections h3edge held at once (open file descriptors above
	// idle), PerHeld the peak RSS above idle per held connection.
	Held    int64 `json:"h3edge_peak_held_connections"`
	PerHeld int64 `json:"h3edge_rss_per_held_connection_bytes,omitempty"`
	// Bans: attacking sources banned during the attack, and when the first was.
	Banned      int     `json:"banned_sources"`
	FirstBanSec float64 `json:"first_ban_seconds,omitempty"`
	// What the attacker got.
	Attacker *attack.Outcome `json:"attacker"`
	// quic-initial-flood's own figures.
	Flood *floodFigures `json:"flood,omitempty"`
	// overload: the legitimate clients once the attack and its held requests ended.
	AfterSuccess float64 `json:"legit_after_success,omitempty"`
	AfterP99us   int64   `json:"legit_after_p99_us,omitempty"`
	// Timeline is the run's time series, the chart's data.
	Timeline *attackTimeline `json:"timeline"`
}

// RunAttack runs the named attack against an h3edge process (see the package's
// Options) and judges it. Servers are stopped before it returns.
func RunAttack(ctx context.Context, name string, opt Options) (*Report, error) {
	a, err := attack.Lookup(name)
	if err != nil {
		return nil, err
	}
	e := &env{opt: opt, log: opt.Log}
	if e.log == nil {
		e.log = io.Discard
	}
	if err := e.setup(); err != nil {
		return nil, err
	}
	defer e.close()
	start := time.Now()
	rep, err := runAttack(ctx, e, a)
	if err != nil {
		return nil, err
	}
	rep.Scenario, rep.Short, rep.Pinned = "attack "+name, opt.Short, e.pinned
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func runAttack(ctx context.Context, e *env, a *attack.Attack) (*Report, error) {
	p := plan(a.Name, e.opt.Short)
	legit, err := bench.ParseSources(attackLegitSources)
	if err != nil {
		return nil, err
	}
	srcs, err := bench.ParseSources(p.sources)
	if err != nil {
		return nil, err
	}
	srv, err := e.startH3edge(ctx, "h3edge", p.config)
	if err != nil {
		return nil, err
	}
	// Full mode measures a second h3edge, never attacked, side by side: its p99 in
	// the same seconds is the reference the attacked one is held to, so that the load
	// of other processes on the machine (the quiet phase came earlier) cancels out.
	var ctl *server
	var ctlLegit []netip.Addr
	if !e.opt.Short {
		if ctl, err = e.startH3edge(ctx, "h3edge-control", p.config); err != nil {
			return nil, err
		}
		if ctlLegit, err = bench.ParseSources(attackControlSources); err != nil {
			return nil, err
		}
	}
	proto := bench.Proto(a.Proto)
	quiet := 3 * time.Second
	if e.opt.Short {
		quiet = 1500 * time.Millisecond
	}
	// The time series, from the start of the quiet phase (attack_timeline.go).
	series := &legitSeries{t0: time.Now()}
	var ctlSeries *legitSeries
	if ctl != nil {
		ctlSeries = &legitSeries{t0: series.t0}
	}
	load := func(s *server, sources []netip.Addr, d time.Duration, ls *legitSeries) (*bench.Result, error) {
		return runLoad(ctx, bench.Config{
			URL: s.url("/"), Proto: proto, Connections: len(sources), Streams: 1,
			Rate: float64(len(sources) * attackLegitRate), Duration: d, Timeout: 2 * time.Second,
			Sources: sources, Pins: []string{s.pin}, OnMeasured: ls.record,
		})
	}
	// legitLoad runs the legitimate clients on srv and, in full mode, on ctl at the
	// same time.
	legitLoad := func(d time.Duration) (res, cres *bench.Result, err error) {
		var cerr error
		var wg sync.WaitGroup
		if ctl != nil {
			wg.Go(func() { cres, cerr = load(ctl, ctlLegit, d, ctlSeries) })
		}
		res, err = load(srv, legit, d, series)
		wg.Wait()
		return res, cres, errors.Join(err, cerr)
	}
	e.logf("attack %s: quiet phase, %v", a.Name, quiet)
	qres, qctl, err := legitLoad(quiet)
	if err != nil {
		return nil, err
	}
	idle, _, err := ProcessMemory(srv.pid())
	if err != nil {
		return nil, err
	}
	idleFDs := openFiles(srv.pid())
	tc, err := bench.TLSConfig("127.0.0.1", nil, []string{srv.pin}, true)
	if err != nil {
		return nil, err
	}
	target := attack.Target{Addr: srv.addr, Sources: srcs, Conns: p.conns, TLS: tc, Duration: p.duration, Interval: p.interval,
		Count: p.count, Rate: p.rate, SampleEvery: attackSampleEvery}

	e.logf("attack %s: %d sources, %v, with the legitimate clients", a.Name, len(srcs), p.duration)
	cpu0, err := srv.cpu()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	watch := newBanWatch(srv.admin, srcs, t0)
	sctx, stopSampling := context.WithCancel(ctx)
	var peak, peakFDs int64
	var wg sync.WaitGroup
	wg.Go(func() { peak, peakFDs = sampleRSS(sctx, srv.pid()) })
	wg.Go(func() { watch.run(sctx) })
	var fw *floodWatch
	if p.count > 0 {
		fw = &floodWatch{admin: srv.admin}
		fw.poll(ctx) // the kernel drops before the flood
		wg.Go(func() { fw.run(sctx) })
	}
	var lres, lctl *bench.Result
	var lerr error
	legitDone := make(chan struct{})
	go func() {
		defer close(legitDone)
		lres, lctl, lerr = legitLoad(p.duration)
	}()
	out, aerr := e.runAttacker(ctx, a, target, p.sources, srv.pin)
	elapsed := time.Since(t0)
	<-legitDone // as long as the attack
	cpu1, cpuErr := srv.cpu()
	stopSampling()
	wg.Wait()
	if aerr != nil {
		return nil, aerr
	}
	if lerr != nil {
		return nil, lerr
	}
	if cpuErr != nil {
		return nil, cpuErr
	}
	var after *bench.Result
	if p.overload && srv.alive() == nil {
		// The attacker's last requests end within attack.HeldRequest of its stop.
		e.logf("attack %s: the legitimate clients after the attack", a.Name)
		if !sleep(ctx, 6*time.Second) {
			return nil, ctx.Err()
		}
		if after, err = load(srv, legit, quiet, series); err != nil {
			return nil, err
		}
	}
	alive := srv.alive()

	f := attackFigures{
		Attack: a.Name, Sources: len(srcs), Duration: p.duration.String(),
		QuietP99us: qres.Latency.P99.Microseconds(), LegitP99us: lres.Latency.P99.Microseconds(),
		LegitSent: lres.Requests, IdleRSS: idle, PeakRSS: max(peak, idle),
		CPUBusy:  float64(cpu1-cpu0) / float64(elapsed),
		Attacker: out,
	}
	if qres.Latency.P99 > 0 {
		f.P99Factor = float64(lres.Latency.P99) / float64(qres.Latency.P99)
	}
	if lctl != nil {
		f.ControlQuietP99us, f.ControlP99us = qctl.Latency.P99.Microseconds(), lctl.Latency.P99.Microseconds()
		if lctl.Latency.P99 > 0 {
			f.P99SideBySide = float64(lres.Latency.P99) / float64(lctl.Latency.P99)
		}
	}
	if lres.Requests > 0 {
		f.LegitSuccess = float64(lres.Status[http.StatusOK]) / float64(lres.Requests)
	}
	if idle > 0 {
		f.RSSFactor = float64(f.PeakRSS) / float64(idle)
	}
	if fw != nil {
		f.Flood = fw.figures(ctx, out, cpu1-cpu0, elapsed)
	}
	if after != nil && after.Requests > 0 {
		f.AfterSuccess = float64(after.Status[http.StatusOK]) / float64(after.Requests)
		f.AfterP99us = after.Latency.P99.Microseconds()
	}
	f.Held = max(peakFDs-idleFDs, 0)
	if f.Held > 0 {
		f.PerHeld = (f.PeakRSS - idle) / f.Held
	}
	bans := watch.result()
	f.Banned = len(bans)
	firstBan := time.Duration(-1)
	if len(bans) > 0 {
		firstBan = slices.Min(bans)
		f.FirstBanSec = firstBan.Seconds()
	}
	f.Timeline = newAttackTimeline(series, ctlSeries, a, out, t0, p.duration, firstBan)

	// The verdict: every check of the plan, the full mode's strict ones too.
	var fails []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	check(alive == nil, "h3edge died: %v", alive)
	if p.overload {
		check(out.Status[http.StatusServiceUnavailable] > 0, "the attacker was never answered 503: h3edge did not shed")
		check(f.AfterSuccess >= attackMinSuccess, "legitimate success after the attack %.3f < %.2f", f.AfterSuccess, attackMinSuccess)
		check(e.opt.Short || f.LegitSuccess >= attackMinSuccess,
			"legitimate success during the attack %.3f < %.2f: the attacker's held requests took the legitimate clients' share of the in-flight cap", f.LegitSuccess, attackMinSuccess)
	} else {
		check(f.LegitSuccess >= attackMinSuccess, "legitimate success %.3f < %.2f", f.LegitSuccess, attackMinSuccess)
	}
	if p.banned {
		bound := attackFullBan
		if e.opt.Short {
			bound = attackShortBan
		}
		check(f.Banned > 0, "no attacking source banned")
		check(f.Banned == 0 || f.FirstBanSec <= bound.Seconds(), "first ban after %.2fs > %v", f.FirstBanSec, bound)
	}
	if p.closeWithin > 0 {
		check(out.Closed > 0, "the server closed no attacking connection")
		check(out.CloseMax <= p.closeWithin, "an attacking connection lasted %v > %v", out.CloseMax.Round(time.Millisecond), p.closeWithin)
	}
	if p.status != 0 {
		check(out.Status[p.status] > 0, "the attacker never got %d (got %v)", p.status, out.Status)
	}
	if fl := f.Flood; fl != nil {
		check(fl.Initials >= int64(p.count)*9/10, "the flood sent %d Initials of %d", fl.Initials, p.count)
		check(fl.Retries > 0, "no Retry came back: Retry did not engage")
		check(fl.Handshakes <= fl.HandshakeBound, "h3edge began %d handshakes with spoofed sources > retry_above × (seconds + 1) = %d",
			fl.Handshakes, fl.HandshakeBound)
		check(fl.PeakTracked <= fl.MaxTracked, "tracked sources peaked at %d > ip.max_tracked %d", fl.PeakTracked, fl.MaxTracked)
	}
	if p.rssPerConn > 0 {
		check(f.Held > 0, "h3edge held no connection of the attacker")
		check(f.PerHeld <= p.rssPerConn, "peak RSS %d KiB above idle per held connection (%d held) > %d KiB", f.PerHeld>>10, f.Held, p.rssPerConn>>10)
	} else {
		check(f.RSSFactor <= p.rssFactor, "peak RSS %.1f× idle > %.1f×", f.RSSFactor, p.rssFactor)
	}
	if lctl != nil && !p.overload {
		limit := time.Duration(float64(lctl.Latency.P99)*attackFullP99) + attackP99Slack
		check(lres.Latency.P99 <= limit, "legitimate p99 %v > 1.5× the unattacked control's %v (+2 ms)", lres.Latency.P99, lctl.Latency.P99)
	}

	rep := &Report{
		Claim: claimAttack(a.Summary, p, e.opt.Short),
		Table: [][]string{
			{"", "legit ok", "legit p99", "p99 ÷ quiet", "p99 ÷ control", "h3edge CPU", "RSS peak ÷ idle", "banned", "first ban", "attacker got"},
			{"quiet", fmt.Sprintf("%.3f", float64(qres.Status[http.StatusOK])/float64(max(qres.Requests, 1))), ms(qres.Latency.P99), "1",
				ratioText(qres, qctl), "", "", "", "", ""},
			{"attack", fmt.Sprintf("%.3f", f.LegitSuccess), ms(lres.Latency.P99), fmt.Sprintf("%.2f", f.P99Factor), ratioText(lres, lctl),
				fmt.Sprintf("%.0f%%", 100*f.CPUBusy), fmt.Sprintf("%.1f (%d → %d MB)", f.RSSFactor, idle>>20, f.PeakRSS>>20),
				fmt.Sprintf("%d/%d", f.Banned, len(srcs)), banText(f), attackerText(out)},
		},
		Figures: f,
		Chart:   attackChart(a.Name, f.Timeline),
		Notes: []string{fmt.Sprintf("attacker: %d connections, %d refused, %d closed by h3edge (close p50 %v, max %v), %d held at the end, at most %d open at once, goaway %v, sent %d",
			out.Conns, out.Refused, out.Closed, out.CloseP50.Round(time.Millisecond), out.CloseMax.Round(time.Millisecond), out.Held, out.PeakOpen, out.GoAway, out.Sent),
			fmt.Sprintf("h3edge: at most %d connections held at once (open files above idle), %d KiB of peak RSS above idle each", f.Held, f.PerHeld>>10)},
	}
	if after != nil {
		rep.Table = append(rep.Table, []string{"after", fmt.Sprintf("%.3f", f.AfterSuccess), ms(after.Latency.P99), "", "", "", "", "", "", ""})
	}
	if fl := f.Flood; fl != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("flood: %d Initials from as many addresses, %d read by h3edge (%d dropped by its kernel socket), %d Retries back, "+
			"%d handshakes begun (bound %d), %d refused; tracked sources peak %d (max %d); h3edge CPU %.1f µs per Initial read",
			fl.Initials, fl.Read, fl.KernelDrops, fl.Retries, fl.Handshakes, fl.HandshakeBound, fl.Refused, fl.PeakTracked, fl.MaxTracked, fl.CPUPerInitialUs))
	}
	rep.Holds = len(fails) == 0
	rep.Verdict = "every check held"
	if !rep.Holds {
		rep.Verdict = fmt.Sprint(fails)
	}
	return rep, nil
}

// claimAttack states what the run checks.
func claimAttack(summary string, p attackPlan, short bool) string {
	s := summary + ": h3edge stays up and ≥ 95% of the legitimate requests succeed"
	if p.overload {
		shed, when := "", "while the attack lasts and "
		if short {
			shed, when = " (the legitimate clients' new work too, reported)", ""
		}
		s = summary + ": h3edge stays up, sheds the attacker's excess with 503" + shed +
			", and serves ≥ 95% of the legitimate requests " + when + "once the attack's held requests have ended"
	}
	if p.banned {
		bound := attackFullBan
		if short {
			bound = attackShortBan
		}
		s += fmt.Sprintf("; an attacking source is banned within %v", bound)
	}
	if p.closeWithin > 0 {
		s += fmt.Sprintf("; every attacking connection is ended within %v", p.closeWithin)
	}
	if p.status != 0 {
		s += fmt.Sprintf("; the attacker is answered %d", p.status)
	}
	if p.count > 0 {
		s += fmt.Sprintf("; %d Initials at %.0f/s: Retries come back, h3edge begins at most %d handshakes a second of the flood (ip.retry_above, plus one second's worth), "+
			"tracked sources stay ≤ ip.max_tracked (%d)", p.count, p.rate, floodRetryAbove, floodMaxTracked)
	}
	if p.rssPerConn > 0 {
		s += fmt.Sprintf("; peak RSS ≤ idle + %d KiB per connection held", p.rssPerConn>>10)
	} else {
		s += fmt.Sprintf("; peak RSS ≤ %.0f× idle", p.rssFactor)
	}
	if !short && !p.overload {
		s += "; legitimate p99 ≤ 1.5× that of an unattacked h3edge measured side by side (+2 ms)"
	}
	return s
}

// ratioText is res's p99 ÷ ctl's, or "-" without a control (short mode).
func ratioText(res, ctl *bench.Result) string {
	if ctl == nil || ctl.Latency.P99 <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (%s)", float64(res.Latency.P99)/float64(ctl.Latency.P99), ms(ctl.Latency.P99))
}

func banText(f attackFigures) string {
	if f.Banned == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", f.FirstBanSec)
}

func attackerText(o *attack.Outcome) string {
	return fmt.Sprintf("%d responses, %d conns (%d refused)", o.Responses, o.Conns, o.Refused)
}

// sampleRSS returns the peak resident set of pid and its peak of open files, sampled
// every 20 ms until ctx ends.
func sampleRSS(ctx context.Context, pid int) (peak, files int64) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if rss, _, err := ProcessMemory(pid); err == nil {
			peak = max(peak, rss)
		}
		files = max(files, openFiles(pid))
		select {
		case <-ctx.Done():
			return peak, files
		case <-t.C:
		}
	}
}

// openFiles counts pid's open file descriptors (each TCP connection h3edge holds is
// one); 0 where /proc cannot tell.
func openFiles(pid int) int64 {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return int64(len(fds))
}

// banWatch polls h3edge's ban list and notes when each attacking source first
// appears in it.
type banWatch struct {
	admin netip.AddrPort
	srcs  []netip.Addr
	t0    time.Time

	mu    sync.Mutex
	first map[netip.Addr]time.Duration
}

func newBanWatch(admin netip.AddrPort, srcs []netip.Addr, t0 time.Time) *banWatch {
	return &banWatch{admin: admin, srcs: srcs, t0: t0, first: map[netip.Addr]time.Duration{}}
}

// run polls every 50 ms until ctx ends.
func (w *banWatch) run(ctx context.Context) { pollEvery(ctx, 50*time.Millisecond, w.poll) }

// pollEvery calls poll at once and then every d until ctx ends.
func pollEvery(ctx context.Context, d time.Duration, poll func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *banWatch) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.admin.String()+"/api/v1/bans", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var body struct {
		Bans []struct {
			Prefix netip.Prefix `json:"prefix"`
		} `json:"bans"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return
	}
	now := time.Since(w.t0)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range body.Bans {
		for _, s := range w.srcs {
			if _, seen := w.first[s]; !seen && b.Prefix.Contains(s) {
				w.first[s] = now
			}
		}
	}
}

// result returns when each banned source was first seen banned.
func (w *banWatch) result() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for _, d := range w.first {
		out = append(out, d)
	}
	return out
}

// runAttacker runs the attack: in a child process at nice 19 when Options has an
// AttackCommand, else here. sources is target.Sources as written in the plan.
func (e *env) runAttacker(ctx context.Context, a *attack.Attack, t attack.Target, sources, pin string) (*attack.Outcome, error) {
	if e.opt.AttackCommand == nil {
		return a.Run(ctx, t)
	}
	argv := e.opt.AttackCommand([]string{"-attack", a.Name, "-addr", t.Addr.String(), "-sources", sources,
		"-conns", strconv.Itoa(t.Conns), "-duration", t.Duration.String(), "-interval", t.Interval.String(), "-pin", pin,
		"-count", strconv.Itoa(t.Count), "-rate", strconv.FormatFloat(t.Rate, 'g', -1, 64), "-sample-every", t.SampleEvery.String()})
	if nice, err := exec.LookPath("nice"); err == nil {
		argv = append([]string{nice, "-n", "19"}, argv...)
	}
	ctx, cancel := context.WithTimeout(ctx, t.Duration+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("bench: attack client: %v: %s", err, stderr.Bytes())
	}
	var o attack.Outcome
	if err := json.Unmarshal(out, &o); err != nil {
		return nil, fmt.Errorf("bench: attack client output: %v: %q", err, out)
	}
	return &o, nil
}
