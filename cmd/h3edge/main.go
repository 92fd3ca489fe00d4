// Command h3edge is an HTTP/3 edge server that rate-limits and proxies API traffic.
//
//	h3edge [serve] [-config FILE] [-listen ADDR] [-upstream URL] [-redis URL] [-admin ADDR] [-log-format text|json]
//	h3edge validate -config FILE
//	h3edge version
//
// Exit codes: 0 clean shutdown, 1 runtime failure, 2 bad usage or bad configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/h3edge/h3edge/edge"
	"github.com/h3edge/h3edge/edge/config"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "serve" || args[0] == "validate" || args[0] == "version") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, "h3edge", version(), runtime.Version())
		return 0
	case "validate":
		return validate(args, stdout, stderr)
	}
	return serve(args, stderr)
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// synopsis is what -h prints above a command's flags.
const synopsis = `usage:
  h3edge [serve] [-config FILE] [-listen ADDR] [-upstream URL] [-redis URL] [-admin ADDR] [-log-format text|json]
  h3edge validate -config FILE    check a configuration: exit 0, or 2 with one line per problem
  h3edge version                  print h3edge's version and the Go it was built with
`

// newFlagSet returns a flag set whose -h prints the synopsis of every command.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\nflags of %s:\n", synopsis, name)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs; it returns an exit code when the command should stop
// (0 after -h, 2 after bad usage), else -1.
func parseFlags(fs *flag.FlagSet, args []string) int {
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	}
	return -1
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("h3edge validate", stderr)
	file := fs.String("config", "", "configuration `file` to check")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if *file == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: h3edge validate -config FILE")
		return 2
	}
	cfg, err := loadConfig(*file, nil)
	if err == nil {
		err = cfg.ValidateFiles() // tls.acme.ca_roots and keys.file, as the server will read them
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	fmt.Fprintf(stdout, "%s: ok\n", *file)
	return 0
}

// overrides are the serve flags that replace values of the file.
type overrides struct {
	listen, upstream, redis, admin, logFormat string
}

func (o *overrides) apply(c *config.Config) {
	if o.listen != "" {
		c.Listen = o.listen
	}
	if o.upstream != "" {
		c.Upstream = o.upstream
	}
	if o.redis != "" {
		if c.Redis == nil {
			c.Redis = &config.RedisConfig{}
		}
		c.Redis.URL, c.Redis.Cluster, c.Redis.Sentinel = o.redis, nil, nil
	}
	if o.admin != "" {
		c.Admin.Listen = o.admin
	}
	if o.logFormat != "" {
		c.LogFormat = o.logFormat
	}
}

// loadConfig reads file (or the built-in defaults), applies the flags, resolves defaults
// and validates.
func loadConfig(file string, o *overrides) (*config.Config, error) {
	cfg := config.Default()
	if file != "" {
		var err error
		// After decode problems Load returns the partial configuration too, and
		// Validate reports them with every other problem.
		if cfg, err = config.Load(file); cfg == nil {
			return nil, err
		}
	}
	if o != nil {
		o.apply(cfg)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func serve(args []string, stderr io.Writer) int {
	fs := newFlagSet("h3edge serve", stderr)
	var o overrides
	file := fs.String("config", "", "configuration `file` (YAML); without it the built-in defaults apply")
	fs.StringVar(&o.listen, "listen", "", "TCP and UDP `address` to serve on (default :8443)")
	fs.StringVar(&o.upstream, "upstream", "", "origin `URL` to proxy to (default: built-in demo origin)")
	fs.StringVar(&o.redis, "redis", "", "Redis `URL` for shared quota")
	fs.StringVar(&o.admin, "admin", "", "admin API `address` (default 127.0.0.1:9090)")
	fs.StringVar(&o.logFormat, "log-format", "", "log format: text or json")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "h3edge: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, err := loadConfig(*file, &o)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	// A reload may switch log_format: the handler in force is swapped under every
	// logger made from log.
	handler := newSwapHandler(newLogHandler(cfg.LogFormat, stderr))
	log := slog.New(handler)
	gogc, memLimit := tuneGC()
	if gogc != 0 {
		gcDone := make(chan struct{})
		defer close(gcDone)
		go followHeap(gcDone)
	}

	srv, err := edge.New(cfg, edge.Options{
		Logger:       log,
		Load:         func() (*config.Config, error) { return loadConfig(*file, &o) },
		SetLogFormat: func(format string) { handler.swap(newLogHandler(format, stderr)) },
	})
	if err != nil {
		fmt.Fprintln(stderr, "h3edge:", err)
		return 1
	}
	if err := srv.Listen(); err != nil {
		fmt.Fprintln(stderr, "h3edge:", err)
		return 1
	}
	attrs := []any{"version", version(), "go", runtime.Version(), "listen", srv.Addr().String(), "protocols", "h3,h2,http/1.1", "origin", originSummary(cfg)}
	if srv.Certs().Development() {
		attrs = append(attrs, "certificate", "self-signed development", "spki_pin", srv.Certs().Pin())
	} else {
		attrs = append(attrs, "spki_pin", srv.Certs().Pin())
	}
	if a := cfg.TLS.ACME; a != nil {
		// The development certificate above is then only the fallback for other names.
		attrs = append(attrs, "acme_domains", strings.Join(a.Domains, ","), "acme_ca", a.CA)
	}
	if cfg.HTTPListen != "" {
		attrs = append(attrs, "http_listen", cfg.HTTPListen)
	}
	if a := srv.AdminAddr(); a != nil {
		attrs = append(attrs, "admin", a.String())
	}
	if cfg.File != "" {
		attrs = append(attrs, "config", cfg.File)
	}
	if gogc != 0 {
		attrs = append(attrs, "gogc", gogc)
	}
	if memLimit != 0 {
		attrs = append(attrs, "gomemlimit", memLimit)
	}
	// Signals are caught before the start-up line, which tells scripts the edge is up:
	// a SIGHUP sent on seeing it must reload, not kill (SIGHUP's default action).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	log.Info("h3edge serving", attrs...)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	for {
		select {
		case err := <-errc:
			if errors.Is(err, http.ErrServerClosed) {
				return 0
			}
			log.Error("serving failed", "error", err)
			return 1
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				// A failed reload keeps the old configuration and logs why.
				if err := srv.Reload(); err == nil {
					log.Info("reloaded", "spki_pin", srv.Certs().Pin())
				}
				continue
			}
			timeout := srv.Config().ShutdownTimeout // a reload may have changed it
			log.Info("shutting down", "signal", sig.String(), "timeout", timeout)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := srv.Shutdown(ctx)
			cancel()
			<-errc
			if err != nil {
				log.Warn("shutdown timed out; remaining requests were aborted", "error", err)
			}
			return 0
		}
	}
}

// originSummary says in the start-up line what answers the requests h3edge admits: the
// shorthand's origin, the routes and their pools, or the demo origin (only when neither
// is configured: with routes, a request none matches gets 404, never the demo).
func originSummary(cfg *config.Config) string {
	switch {
	case cfg.Upstream != "":
		return cfg.Upstream
	case len(cfg.Routes) > 0:
		return fmt.Sprintf("%s to %s", plural(len(cfg.Routes), "route"), plural(len(cfg.Upstreams), "upstream pool"))
	}
	return "built-in demo origin"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
