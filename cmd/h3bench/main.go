// Command h3bench is h3edge's load generator for HTTP/3, HTTP/2 and HTTP/1.1.
//
//	h3bench -url URL [-proto h3|h2|h1] [-c CONNS] [-m STREAMS] [-d DURATION | -n REQUESTS]
//	        [-rate RPS] [-sources 127.0.0.2-127.0.0.200] [-H 'Name: value']... [-keys N]
//	        [-key-header X-API-Key] [-zipf S] [-insecure] [-pin BASE64SPKI] [-cacert FILE]
//	        [-timeout 5s] [-warmup 1s] [-json FILE] [-method GET] [-body-size N]
//	        [-respect-limits]
//	h3bench scenario NAME [-short] [-json FILE] [-svg FILE] [-h3edge PATH] [-no-pin]
//	h3bench attack NAME [-short] [-json FILE] [-svg FILE] [-h3edge PATH] [-no-pin]
//
// Exit codes of a run: 0 the run completed and got responses, 1 a runtime failure or not
// a single response, 2 bad usage.
//
// A scenario (baseline, noisy-neighbour, boundary, fields, accuracy, outage, drop-cost)
// starts h3edge and what else it needs (redis-server) as separate processes on
// loopback, prints a table and checks its claim. Exit codes: 0 the claim holds, 1 it
// does not, 2 bad usage, 3 the scenario waits for a feature this build lacks, 4 it could
// not run (no h3edge binary, a server that would not start). `h3bench scenario` alone
// lists them.
//
// An attack (rapid-reset, made-you-reset, continuation, hpack-bomb, settings-flood,
// ping-flood, empty-frames, slowloris, slow-post, slow-read, quic-stall,
// quic-initial-flood, overload) runs one protocol abuse against an h3edge process while
// 20 legitimate clients keep working, with the scenarios' exit codes; -svg draws the
// run's time line. `h3bench attack` alone lists them.
//
// "h3bench serve-bare -listen ADDR" (not advertised) runs the bare baseline server the
// scenarios compare h3edge with; "h3bench serve-origin -listen ADDR" (not advertised)
// the proxy scenario's HTTP/1.1 origin; "h3bench attack-client" (not advertised either)
// is the attacker h3bench attack starts as a process of its own.
package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/h3edge/h3edge/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ", ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "scenario":
			return runScenario(args[1:], stdout, stderr)
		case "attack":
			return runAttack(args[1:], stdout, stderr)
		case "attack-client":
			return runAttackClient(args[1:], stdout, stderr)
		case "serve-bare":
			return serveBare(args[1:], stderr)
		case "serve-origin":
			return serveOrigin(args[1:], stderr)
		}
	}
	fs := flag.NewFlagSet("h3bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg      bench.Config
		proto    = fs.String("proto", "h3", "protocol: h3, h2 or h1")
		sources  = fs.String("sources", "", "local source addresses, e.g. 127.0.0.2-127.0.0.200 (connections round-robin)")
		headers  listFlag
		pins     listFlag
		cacert   = fs.String("cacert", "", "PEM file of CA certificates to verify the server with (default: system roots)")
		jsonFile = fs.String("json", "", "write the results as JSON to this file")
	)
	fs.StringVar(&cfg.URL, "url", "", "target URL (required)")
	fs.IntVar(&cfg.Connections, "c", 1, "connections (h1: each makes -m connections)")
	fs.IntVar(&cfg.Streams, "m", 1, "requests in flight per connection")
	fs.DurationVar(&cfg.Duration, "d", 10*time.Second, "measured duration, after the warm-up")
	fs.Int64Var(&cfg.Requests, "n", 0, "measured requests (instead of -d)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop at this many requests/s in total (0: closed loop)")
	fs.Var(&headers, "H", "request header 'Name: value' (repeatable)")
	fs.IntVar(&cfg.Keys, "keys", 0, "rotate this many API keys k-000000… (0: none)")
	fs.StringVar(&cfg.KeyHeader, "key-header", "X-API-Key", "field carrying the API key")
	fs.Float64Var(&cfg.Zipf, "zipf", 0, "draw keys from a Zipf law with this exponent (>1; 0: uniform)")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "do not verify the server certificate")
	fs.Var(&pins, "pin", "accept a server certificate with this base64 SHA-256 SPKI pin instead of verifying its chain (repeatable)")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "deadline of each request")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured warm-up period")
	fs.StringVar(&cfg.Method, "method", "GET", "request method")
	fs.IntVar(&cfg.BodySize, "body-size", 0, "request body size in bytes")
	fs.BoolVar(&cfg.RespectLimits, "respect-limits", false, "pace each client key by the RateLimit fields: wait t after r=0, Retry-After after a 429")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "h3bench: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q (scenarios: h3bench scenario NAME)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["n"] && set["d"] {
		return usage("-d and -n are exclusive")
	}
	if set["n"] {
		cfg.Duration = 0
	}
	cfg.Proto = bench.Proto(*proto)
	cfg.Pins = pins
	if *sources != "" {
		var err error
		if cfg.Sources, err = bench.ParseSources(*sources); err != nil {
			return usage("-sources: %v", err)
		}
	}
	for _, h := range headers {
		name, value, err := bench.ParseHeader(h)
		if err != nil {
			return usage("-H: %v", err)
		}
		if cfg.Header == nil {
			cfg.Header = make(map[string][]string)
		}
		cfg.Header[name] = append(cfg.Header[name], value)
	}
	if *cacert != "" {
		pem, err := os.ReadFile(*cacert)
		if err != nil {
			return usage("-cacert: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return usage("-cacert: no certificate in %s", *cacert)
		}
	}
	if err := cfg.Validate(); err != nil {
		return usage("%v", err)
	}
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			cfg.Progress = stderr
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg)
	if res == nil {
		fmt.Fprintf(stderr, "h3bench: %v\n", err)
		return 1
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "h3bench: %v\n", err)
	}
	if err := res.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "h3bench: %v\n", err)
		return 1
	}
	if *jsonFile != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonFile, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "h3bench: -json: %v\n", err)
			return 1
		}
	}
	if res.Responses == 0 {
		fmt.Fprintln(stderr, "h3bench: no responses")
		return 1
	}
	return 0
}
