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

// Exit codes of h3bench scenario.
const (
	exitHolds = 0
	exitFails = 1
	exitUsage = 2
	exitNoRun = 4 // 3 meant "waits for a feature this build lacks", which none does now
)

func runScenario(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("h3bench scenario", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		opt      scenario.Options
		jsonFile = fs.String("json", "", "write the report as JSON to this file")
		svgFile  = fs.String("svg", "", "write the chart as SVG to this file")
		quiet    = fs.Bool("q", false, "no progress lines on stderr")
	)
	fs.BoolVar(&opt.Short, "short", false, "short mode (≤ 10 s, as CI runs it)")
	fs.StringVar(&opt.H3edge, "h3edge", "", "h3edge binary (default: $H3EDGE, else go build ./cmd/h3edge of the module in the working directory)")
	fs.BoolVar(&opt.NoPin, "no-pin", false, "do not pin the servers to CPU 0 and h3bench to CPU 1 with taskset")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: h3bench scenario NAME [-short] [-json FILE] [-svg FILE] [-h3edge PATH] [-no-pin] [-q]")
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "\nscenarios:")
		listScenarios(stderr)
	}
	name, ok := parseNamed(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if _, err := scenario.Claim(name); err != nil {
		fmt.Fprintf(stderr, "h3bench scenario: %v\n", err)
		return exitUsage
	}
	if !*quiet {
		opt.Log = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := scenario.Run(ctx, name, opt)
	if err != nil {
		fmt.Fprintf(stderr, "h3bench scenario %s: %v\n", name, err)
		return exitNoRun
	}
	return report(stdout, stderr, "h3bench scenario", rep, *jsonFile, *svgFile)
}

// report writes rep as text to stdout, as JSON to jsonFile and its chart as SVG to
// svgFile (each if named), and returns the exit code of its verdict; cmd names the
// command in errors.
func report(stdout, stderr io.Writer, cmd string, rep *scenario.Report, jsonFile, svgFile string) int {
	rep.WriteText(stdout)
	if jsonFile != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonFile, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: -json: %v\n", cmd, err)
			return exitNoRun
		}
	}
	if svgFile != "" && rep.Chart != nil {
		f, err := os.Create(svgFile)
		if err == nil {
			err = rep.Chart.WriteSVG(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: -svg: %v\n", cmd, err)
			return exitNoRun
		}
	}
	if !rep.Holds {
		return exitFails
	}
	return exitHolds
}

func listScenarios(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, name := range scenario.Names() {
		claim, _ := scenario.Claim(name)
		fmt.Fprintf(tw, "  %s\t%s\n", name, claim)
	}
	tw.Flush()
}

// serveBare runs the bare baseline server until SIGINT or SIGTERM.
func serveBare(args []string, stderr io.Writer) int {
	return serveHelper("serve-bare", "127.0.0.1:8444", "address for TCP (HTTP/1.1, HTTP/2) and UDP (HTTP/3)", scenario.ServeBare, args, stderr)
}

// serveOrigin runs the proxy scenario's origin (scenario.ServeOrigin) likewise.
func serveOrigin(args []string, stderr io.Writer) int {
	return serveHelper("serve-origin", "127.0.0.1:8081", "TCP address for plain HTTP/1.1", scenario.ServeOrigin, args, stderr)
}

// serveHelper runs one of the scenarios' helper servers: "-listen ADDR" and nothing
// else, h3edge's collector setting, serve until SIGINT or SIGTERM.
func serveHelper(name, listenDefault, listenUsage string, serve func(context.Context, string, io.Writer) error, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("h3bench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", listenDefault, listenUsage)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "h3bench %s: unexpected argument %q\n", name, fs.Arg(0))
		return exitUsage
	}
	scenario.UseEdgeGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *listen, stderr); err != nil {
		fmt.Fprintf(stderr, "h3bench %s: %v\n", name, err)
		return 1
	}
	return 0
}

// parseNamed parses a subcommand's arguments: one name, before or after the flags.
// It reports false (after printing why) on bad usage.
func parseNamed(fs *flag.FlagSet, args []string, stderr io.Writer) (name string, ok bool) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return "", false
		}
	}
	if name == "" {
		fs.Usage()
		return "", false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return "", false
	}
	return name, true
}
