// Package scenario holds h3bench's scenarios, each proving one claim of the README: it
// starts h3edge, the bare baseline server (ServeBare) and redis-server as separate
// processes, drives them with bench's load generator and its own floods, and measures
// them from outside (CPU and memory per process).
//
// The floods drop-cost sends are package flood, the attack clients package attack. The
// rest stays one package of about 6 000 lines, beyond the module's ~2 000, because the
// eight scenarios and the attack runner (RunAttack) share one harness — the processes they start (proc.go), the bare baseline (bare.go), the
// schedule-measure-analyse-report phases and the Report every scenario returns — and
// each scenario is a few files of its own (outage*.go, noisy*.go, dropcost*.go, …);
// a package per scenario would export that harness only for the scenarios to call it.
package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/chart"
	"github.com/h3edge/h3edge/bench/testkit"
)

// A scenario proves one claim of the README with one command: it starts what it needs
// (h3edge, the bare server, redis-server) as separate processes on loopback, drives
// them with bench.Run, prints a table, and says whether the claim held.

// Options configures Run. The zero value runs the full scenario, building h3edge from
// the module in the working directory.
type Options struct {
	// Short runs the short mode (at most 10 s, as CI does), with looser floors where a
	// short run is noisier; the report says which.
	Short bool
	// H3edge is the h3edge binary. If empty, $H3EDGE is used; if that is empty too,
	// ./cmd/h3edge of the module in the working directory is built into Dir.
	H3edge string
	// BareCommand returns the command that runs the bare server on listen (see
	// ServeBare; it must print ServeBare's ready line). If nil, this executable's hidden
	// "serve-bare -listen ADDR" subcommand is used, as cmd/h3bench provides.
	BareCommand func(listen string) []string
	// BareEnv is added to the bare server's environment.
	BareEnv []string
	// OriginCommand returns the command that runs the proxy scenario's HTTP/1.1 origin
	// on listen (see ServeOrigin; it must print its ready line). If nil, this
	// executable's hidden "serve-origin -listen ADDR" subcommand is used.
	OriginCommand func(listen string) []string
	// Dir holds scratch files (configurations, certificate cache, the built binary).
	// If empty, a temporary directory is made and removed at the end.
	Dir string
	// NoPin disables CPU pinning. Otherwise, when taskset is available and there are two
	// CPUs or more, servers run on CPU 0 and this process on CPU 1 during the scenario.
	NoPin bool
	// Log receives progress lines. Nil: none.
	Log io.Writer
	// AttackCommand returns the command that runs an attack client with args (see
	// cmd/h3bench's hidden "attack-client"), for RunAttack: run apart, at the lowest
	// CPU priority (nice 19), the attacker's frame loops and its share of loopback's
	// TCP work do not take the legitimate clients' CPU, as on separate machines. If
	// nil, the attack runs in this process (good enough for short mode's functional
	// checks).
	AttackCommand func(args []string) []string
}

// Report is what a scenario found.
type Report struct {
	Scenario string
	Short    bool
	// Claim is what the scenario checks; Holds whether it did, Verdict why, in a line.
	Claim   string
	Holds   bool
	Verdict string
	// Pinned tells whether the servers ran on CPU 0 and the client on CPU 1.
	Pinned bool
	// Table is the printed table: a header row, then data rows.
	Table [][]string
	// Notes are printed under the table.
	Notes []string
	// Figures holds the scenario's measurements for the JSON file.
	Figures any
	// Chart is the scenario's chart, for the SVG file; nil if none.
	Chart   *chart.Chart
	Elapsed time.Duration
	// Remeasured tells that short mode measured a noisy pair once more (noisy-neighbour),
	// which takes it past its usual time.
	Remeasured bool
}

// ErrUnknown is returned (wrapped) for a name no scenario has.
var ErrUnknown = errors.New("bench: unknown scenario")

// scenario is one entry of the registry.
type scenario struct {
	name  string
	claim string
	run   func(ctx context.Context, e *env) (*Report, error)
}

var scenarios = []scenario{
	{name: "baseline", claim: claimBaseline, run: runBaseline},
	{name: "noisy-neighbour", claim: claimNoisy, run: runNoisy},
	{name: "boundary", claim: claimBoundary, run: runBoundary},
	{name: "fields", claim: claimFields, run: runFields},
	{name: "accuracy", claim: claimAccuracy, run: runAccuracy},
	{name: "outage", claim: claimOutage, run: runOutage},
	{name: "drop-cost", claim: claimDropCost, run: runDropCost},
	{name: "proxy", claim: claimProxy, run: runProxy},
}

// Names lists the scenarios in the order of the README.
func Names() []string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	return names
}

// Claim returns a scenario's claim, or an error wrapping ErrUnknown.
func Claim(name string) (string, error) {
	for _, s := range scenarios {
		if s.name == name {
			return s.claim, nil
		}
	}
	return "", fmt.Errorf("%w %q (have %s)", ErrUnknown, name, strings.Join(Names(), ", "))
}

// Run runs the named scenario. It returns an error when the scenario could not run at
// all (an unknown name, no h3edge binary, a server that did not start). Otherwise the Report says whether
// the claim held. Servers are stopped before it returns.
func Run(ctx context.Context, name string, opt Options) (*Report, error) {
	i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
	if i < 0 {
		_, err := Claim(name)
		return nil, err
	}
	sc := scenarios[i]
	e := &env{opt: opt, log: opt.Log}
	if e.log == nil {
		e.log = io.Discard
	}
	if err := e.setup(); err != nil {
		return nil, err
	}
	defer e.close()
	start := time.Now()
	rep, err := sc.run(ctx, e)
	if err != nil {
		return nil, err
	}
	rep.Scenario, rep.Short, rep.Claim, rep.Pinned = name, opt.Short, sc.claim, e.pinned
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// env is a scenario's environment: scratch directory, servers, pinning.
type env struct {
	opt     Options
	log     io.Writer
	dir     string
	tempDir bool
	procs   []*process
	pinned  bool
	unpin   func()
}

func (e *env) setup() error {
	e.dir = e.opt.Dir
	if e.dir == "" {
		d, err := os.MkdirTemp("", "h3bench-")
		if err != nil {
			return err
		}
		e.dir, e.tempDir = d, true
	}
	if !e.opt.NoPin && pinning() {
		restore, err := pinSelf(1)
		if err != nil {
			fmt.Fprintf(e.log, "not pinning: %v\n", err)
		} else {
			e.pinned, e.unpin = true, restore
		}
	}
	return nil
}

func (e *env) close() {
	for _, p := range slices.Backward(e.procs) {
		p.stop()
	}
	if e.unpin != nil {
		e.unpin()
	}
	if e.tempDir {
		os.RemoveAll(e.dir)
	}
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, format+"\n", args...)
}

// server is a started server: its process, the address it serves on and the SPKI pin
// of its certificate.
type server struct {
	*process
	addr netip.AddrPort
	pin  string
	// admin is h3edge's admin API address (metrics, bans); invalid for other servers.
	admin netip.AddrPort
}

// url returns https://ADDR/path on the server.
func (s *server) url(path string) string { return "https://" + s.addr.String() + path }

// pinRe matches h3edge's and the bare server's ready lines ("h3edge serving …",
// "bare serving …"), printed once the listeners are up, and finds the SPKI pin in them.
var pinRe = regexp.MustCompile(`serving\b.*spki_pin="?([A-Za-z0-9+/=]{44})`)

// wrap prefixes argv with taskset when the scenario pins servers to CPU 0.
func (e *env) wrap(argv []string) []string {
	if e.pinned {
		return append([]string{"taskset", "-c", "0"}, argv...)
	}
	return argv
}

// h3edgeBinary resolves the h3edge binary once: Options.H3edge, $H3EDGE, or a
// build of the module in the working directory.
func (e *env) h3edgeBinary(ctx context.Context) (string, error) {
	if e.opt.H3edge != "" {
		return e.opt.H3edge, nil
	}
	if p := os.Getenv("H3EDGE"); p != "" {
		e.opt.H3edge = p
		return p, nil
	}
	start := time.Now()
	bin, err := buildH3edge(ctx, e.dir)
	if err != nil {
		return "", err
	}
	e.logf("built %s in %.1fs", bin, time.Since(start).Seconds())
	e.opt.H3edge = bin
	return bin, nil
}

// startH3edge starts h3edge with config (YAML, without listen and admin: they are
// added) on a free loopback port, its admin API on another.
func (e *env) startH3edge(ctx context.Context, name, config string) (*server, error) {
	bin, err := e.h3edgeBinary(ctx)
	if err != nil {
		return nil, err
	}
	port, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	file := filepath.Join(e.dir, name+".yaml")
	config = fmt.Sprintf("listen: 127.0.0.1:%d\nadmin: {listen: 127.0.0.1:%d}\n%s", port, adminPort, config)
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		return nil, err
	}
	s, err := e.startServer(ctx, name, e.wrap([]string{bin, "-config", file}),
		[]string{"XDG_CACHE_HOME=" + filepath.Join(e.dir, "cache")}, port)
	if err != nil {
		return nil, err
	}
	s.admin = netip.AddrPortFrom(s.addr.Addr(), uint16(adminPort))
	return s, nil
}

// startBare starts the bare server on a free loopback port.
func (e *env) startBare(ctx context.Context, name string) (*server, error) {
	port, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	argv, err := helperCommand(e.opt.BareCommand, "serve-bare", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	return e.startServer(ctx, name, e.wrap(argv), e.opt.BareEnv, port)
}

// helperCommand is the command of a helper server on listen: custom's, or this
// executable's hidden subcommand sub ("serve-bare", "serve-origin").
func helperCommand(custom func(listen string) []string, sub, listen string) ([]string, error) {
	if custom != nil {
		return custom(listen), nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{self, sub, "-listen", listen}, nil
}

func (e *env) startServer(ctx context.Context, name string, argv, env []string, port int) (*server, error) {
	p, line, err := startProcess(ctx, name, argv, env, pinRe.MatchString, 15*time.Second)
	if err != nil {
		return nil, err
	}
	e.procs = append(e.procs, p)
	pin := pinRe.FindStringSubmatch(line)[1]
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))
	e.logf("started %s (pid %d) on %v", name, p.pid(), addr)
	return &server{process: p, addr: addr, pin: pin}, nil
}

// startRedis starts redis-server on a free loopback port, without persistence, for the
// scenarios that share quota through Redis; it returns the process and its address.
func (e *env) startRedis(ctx context.Context, name string) (*process, netip.AddrPort, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, netip.AddrPort{}, fmt.Errorf("bench: %s: %w", name, err)
	}
	port, err := testkit.FreePort()
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	argv := e.wrap([]string{bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"})
	p, _, err := startProcess(ctx, name, argv, nil, func(line string) bool {
		return strings.Contains(line, "Ready to accept connections")
	}, 15*time.Second)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	e.procs = append(e.procs, p)
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))
	e.logf("started %s (pid %d) on %v", name, p.pid(), addr)
	return p, addr, nil
}

// WriteText prints the report: the claim, the table, the notes and the verdict.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := "full"
	if r.Short {
		mode = "short"
	}
	fmt.Fprintf(&b, "scenario %s (%s mode, %.1fs", r.Scenario, mode, r.Elapsed.Seconds())
	if r.Pinned {
		b.WriteString(", servers on CPU 0, client on CPU 1")
	} else {
		b.WriteString(", not pinned")
	}
	fmt.Fprintf(&b, ")\nclaim: %s\n\n", r.Claim)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, row := range r.Table {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "note: %s\n", n)
		}
	}
	verdict := "HOLDS"
	if !r.Holds {
		verdict = "FAILS"
	}
	fmt.Fprintf(&b, "\nclaim %s: %s\n", verdict, r.Verdict)
	_, err := io.WriteString(w, b.String())
	return err
}

// MarshalJSON writes {scenario, short, claim, holds, verdict, pinned, elapsed_seconds,
// table, notes, figures}.
func (r *Report) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Scenario   string     `json:"scenario"`
		Short      bool       `json:"short"`
		Claim      string     `json:"claim"`
		Holds      bool       `json:"holds"`
		Verdict    string     `json:"verdict"`
		Pinned     bool       `json:"pinned"`
		Elapsed    float64    `json:"elapsed_seconds"`
		Table      [][]string `json:"table"`
		Notes      []string   `json:"notes,omitempty"`
		Figures    any        `json:"figures"`
		Remeasured bool       `json:"remeasured,omitempty"`
	}{r.Scenario, r.Short, r.Claim, r.Holds, r.Verdict, r.Pinned, r.Elapsed.Seconds(), r.Table, r.Notes, r.Figures, r.Remeasured})
}

// Helpers shared by the scenarios.

// ipLimitsRaised is an ip: section that never throttles a benchmark from one source.
const ipLimitsRaised = `ip:
  connections: {rate: 100000, burst: 100000}
  streams: {rate: 1000000, burst: 1000000}
  max_connections: 100000
`

// abuseOff keeps the penalty box from banning a scenario's clients: scenarios that
// measure a policy's 429s would otherwise see their client banned after 50 of them.
const abuseOff = `abuse: {rejections: 1000000000, within: 1s}
`

// runLoad runs c with a hard bound on top of its own (duration plus slack), returning
// the result or an error if the run could not be set up.
func runLoad(ctx context.Context, c bench.Config) (*bench.Result, error) {
	bound := c.Duration + c.Warmup + c.Timeout + 5*time.Second
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	res, err := bench.Run(ctx, c)
	if err != nil && res == nil {
		return nil, err
	}
	if err != nil && ctx.Err() == nil {
		return nil, err
	}
	return res, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sleep waits d or until ctx ends; it reports whether the full wait happened.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
