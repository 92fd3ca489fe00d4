package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/attack"
	"github.com/h3edge/h3edge/bench/scenario"
)

// runAttack runs h3bench attack NAME: one protocol abuse against h3edge, judged as a
// scenario is (same exit codes, same report).
func runAttack(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("h3bench attack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		opt      scenario.Options
		jsonFile = fs.String("json", "", "write the report as JSON to this file")
		svgFile  = fs.String("svg", "", "write the chart (legitimate p99 and success, the attacker's rate, per 250 ms; the ban marked) as SVG to this file")
		quiet    = fs.Bool("q", false, "no progress lines on stderr")
	)
	fs.BoolVar(&opt.Short, "short", false, "short mode (a few seconds, as CI runs it; only the functional checks)")
	fs.StringVar(&opt.H3edge, "h3edge", "", "h3edge binary (default: $H3EDGE, else go build ./cmd/h3edge of the module in the working directory)")
	fs.BoolVar(&opt.NoPin, "no-pin", false, "do not pin h3edge to CPU 0 and h3bench to CPU 1 with taskset")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: h3bench attack NAME [-short] [-json FILE] [-svg FILE] [-h3edge PATH] [-no-pin] [-q]")
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "\nattacks:")
		tw := tabwriter.NewWriter(stderr, 0, 0, 2, ' ', 0)
		for _, name := range scenario.AttackNames() {
			s, _ := scenario.AttackSummary(name)
			fmt.Fprintf(tw, "  %s\t%s\n", name, s)
		}
		tw.Flush()
	}
	name, ok := parseNamed(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if _, err := scenario.AttackSummary(name); err != nil {
		fmt.Fprintf(stderr, "h3bench attack: %v\n", err)
		return exitUsage
	}
	if !*quiet {
		opt.Log = stderr
	}
	if self, err := os.Executable(); err == nil {
		opt.AttackCommand = func(args []string) []string { return append([]string{self, "attack-client"}, args...) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := scenario.RunAttack(ctx, name, opt)
	if err != nil {
		fmt.Fprintf(stderr, "h3bench attack %s: %v\n", name, err)
		return exitNoRun
	}
	return report(stdout, stderr, "h3bench attack", rep, *jsonFile, *svgFile)
}

// runAttackClient runs h3bench attack-client (not advertised): the attacker of
// h3bench attack, in a process of its own; it prints what it got as JSON.
func runAttackClient(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("h3bench attack-client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		name     = fs.String("attack", "", "attack name")
		addr     = fs.String("addr", "", "target address, 127.0.0.1:PORT")
		sources  = fs.String("sources", "", "attacker source addresses")
		conns    = fs.Int("conns", 0, "connections per source (0: the attack's default)")
		duration = fs.Duration("duration", 0, "how long to attack")
		interval = fs.Duration("interval", 0, "pacing of the slow attacks (0: 1s)")
		pin      = fs.String("pin", "", "the server's SPKI pin")
		count    = fs.Int("count", 0, "quic-initial-flood: Initials to send, each from its own address")
		rate     = fs.Float64("rate", 0, "quic-initial-flood: Initials per second")
		every    = fs.Duration("sample-every", 0, "also report what was sent per this interval (0: totals only)")
	)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	a, err := attack.Lookup(*name)
	if err != nil {
		fmt.Fprintf(stderr, "h3bench attack-client: %v\n", err)
		return exitUsage
	}
	dst, err := netip.ParseAddrPort(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "h3bench attack-client: -addr: %v\n", err)
		return exitUsage
	}
	srcs, err := bench.ParseSources(*sources)
	if err != nil {
		fmt.Fprintf(stderr, "h3bench attack-client: -sources: %v\n", err)
		return exitUsage
	}
	tc, err := bench.TLSConfig(dst.Addr().String(), nil, []string{*pin}, true)
	if err != nil {
		fmt.Fprintf(stderr, "h3bench attack-client: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := a.Run(ctx, attack.Target{Addr: dst, Sources: srcs, Conns: *conns, TLS: tc, Duration: *duration, Interval: *interval,
		Count: *count, Rate: *rate, SampleEvery: *every})
	if err != nil {
		fmt.Fprintf(stderr, "h3bench attack-client: %v\n", err)
		return exitNoRun
	}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		return exitNoRun
	}
	return exitHolds
}
