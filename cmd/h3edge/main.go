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
	"syscall"

	"github.com/h3edge/h3edge/edge"
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

func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("h3edge validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", "", "configuration `file` to check")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: h3edge validate -config FILE")
		return 2
	}
	cfg, err := loadConfig(*file, nil)
	if err == nil {
		err = cfg.ValidateFiles() // keys.file, as the server will read it
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

func (o *overrides) apply(c *edge.Config) {
	if o.listen != "" {
		c.Listen = o.listen
	}
	if o.upstream != "" {
		c.Upstream = o.upstream
	}
	if o.redis != "" {
		if c.Redis == nil {
			c.Redis = &edge.RedisConfig{}
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
func loadConfig(file string, o *overrides) (*edge.Config, error) {
	cfg := edge.Default()
	if file != "" {
		var err error
		// After decode problems Load returns the partial configuration too, and
		// Validate reports them with every other problem.
		if cfg, err = edge.Load(file); cfg == nil {
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
	fs := flag.NewFlagSet("h3edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o overrides
	file := fs.String("config", "", "configuration `file` (YAML); without it the built-in defaults apply")
	fs.StringVar(&o.listen, "listen", "", "TCP and UDP `address` to serve on (default :8443)")
	fs.StringVar(&o.upstream, "upstream", "", "origin `URL` to proxy to (default: built-in demo origin)")
	fs.StringVar(&o.redis, "redis", "", "Redis `URL` for shared quota")
	fs.StringVar(&o.admin, "admin", "", "admin API `address` (default 127.0.0.1:9090)")
	fs.StringVar(&o.logFormat, "log-format", "", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return 2
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
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if cfg.LogFormat == "json" {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(handler)
	gogc, memLimit := tuneGC()

	reload := func() (*edge.Config, error) { return loadConfig(*file, &o) }
	srv, err := edge.New(cfg, edge.Options{Logger: log, Load: reload})
	if err != nil {
		fmt.Fprintln(stderr, "h3edge:", err)
		return 1
	}
	if err := srv.Listen(); err != nil {
		fmt.Fprintln(stderr, "h3edge:", err)
		return 1
	}
	origin := cfg.Upstream
	if origin == "" {
		origin = "built-in demo origin"
	}
	attrs := []any{"version", version(), "go", runtime.Version(), "listen", srv.Addr().String(), "protocols", "h3,h2,http/1.1", "origin", origin}
	if srv.Certs().Development() {
		attrs = append(attrs, "certificate", "self-signed development", "spki_pin", srv.Certs().Pin())
	} else {
		attrs = append(attrs, "spki_pin", srv.Certs().Pin())
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
	log.Info("h3edge serving", attrs...)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
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
			log.Info("shutting down", "signal", sig.String(), "timeout", cfg.ShutdownTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
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
