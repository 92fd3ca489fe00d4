package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

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
		quiet    = fs.Bool("q", false, "no progress lines on stderr")
	)
	fs.BoolVar(&opt.Short, "short", false, "short mode (a few seconds, as CI runs it; only the functional checks)")
	fs.StringVar(&opt.H3edge, "h3edge", "", "h3edge binary (default: $H3EDGE, else go build ./cmd/h3edge of the module in the working directory)")
	fs.BoolVar(&opt.NoPin, "no-pin", false, "do not pin h3edge to CPU 0 and h3bench to CPU 1 with taskset")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: h3bench attack NAME [-short] [-json FILE] [-h3edge PATH] [-no-pin] [-q]")
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "\nattacks:")
		tw := tabwriter.NewWriter(stderr, 0, 0, 2, ' ', 0)
		for _, name := range scenario.AttackNames() {
			s, _ := scenario.AttackSummary(name)
			fmt.Fprintf(tw, "  %s\t%s\n", name, s)
		}
		tw.Flush()
	}
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return exitUsage
		}
	}
	if name == "" {
		fs.Usage()
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "h3bench attack: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if _, err := scenario.AttackSummary(name); err != nil {
		fmt.Fprintf(stderr, "h3bench attack: %v\n", err)
		return exitUsage
	}
	if !*quiet {
		opt.Log = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := scenario.RunAttack(ctx, name, opt)
	if err != nil {
		fmt.Fprintf(stderr, "h3bench attack %s: %v\n", name, err)
		return exitNoRun
	}
	rep.WriteText(stdout)
	if *jsonFile != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonFile, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "h3bench attack: -json: %v\n", err)
			return exitNoRun
		}
	}
	if !rep.Holds {
		return exitFails
	}
	return exitHolds
}
