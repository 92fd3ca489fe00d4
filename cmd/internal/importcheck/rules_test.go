package importcheck

import (
	"fmt"
	"slices"
	"strings"
)

// module is the module's path (DESIGN §2).
const module = "github.com/h3edge/h3edge"

// rule is one row of DESIGN §2's package table. A package of the module follows the
// rule of the longest pkg that is its path or a parent of it, so a new sub-package
// lives in its parent's room (limiter/x may import limiter and be imported where
// limiter may) unless the table gives it a row of its own, as limiter/redisstore has.
// The standard library is always allowed.
type rule struct {
	pkg      string   // module-relative path
	imports  []string // the module's packages (module-relative) its code may import
	external []string // the third-party packages its code may import; "p/..." is p and all below it
	tests    []string // the module's packages its tests may import besides imports and pkg
}

// rules is DESIGN §2's table, with the third-party packages each row's words name.
// Where the code needs more than the table says, the entry says why: those are the
// table's to catch up with, not the code's to drop.
var rules = []rule{
	{pkg: "headers", external: []string{"github.com/dunglas/httpsfv"}},
	{pkg: "limiter", external: []string{"golang.org/x/time/..."}},
	{pkg: "limiter/redisstore", imports: []string{"limiter"}, external: []string{"github.com/redis/go-redis/v9/..."},
		tests: []string{"bench/testkit"}},
	{pkg: "quicconn", imports: []string{"limiter"}, external: []string{
		"github.com/quic-go/quic-go/...",
		// Beyond the table: the kernel's ban filter (classic BPF, SO_ATTACH_FILTER) and
		// batched reads (recvmmsg) of the filtered UDP socket.
		"golang.org/x/net/bpf", "golang.org/x/net/ipv4", "golang.org/x/sys/unix",
	}, tests: []string{
		"certs",         // certs.SelfSigned: the one self-signed certificate helper of the module
		"bench/testkit", // WaitFor
		"bench/quicpkt", // Initials with forged Retry tokens (TestRetryTokens)
	}},
	{pkg: "certs"},
	// certs: which certificate a handshake gets, and the listing, rank ACME's beside the files'.
	{pkg: "certs/acme", imports: []string{"certs"}, external: []string{
		// Beyond the table: ACME (DESIGN §10) with a well-kept library rather than the
		// protocol written here, certmagic (Caddy's), whose Storage and Locker let a fleet
		// share certificates and one ordering lock; it logs through zap, bridged to slog.
		"github.com/caddyserver/certmagic", "go.uber.org/zap", "go.uber.org/zap/zapcore",
	}},
	{pkg: "edge", imports: []string{"headers", "limiter", "limiter/redisstore", "quicconn", "certs", "certs/acme",
		// Its rooms below, one per step of DESIGN §1 (README's Layout names them).
		"edge/config", "edge/admission", "edge/bans", "edge/answer", "edge/identity", "edge/rules", "edge/enforce",
		"edge/admin", "edge/metrics", "edge/accesslog", "edge/route", "edge/upstream", "edge/demo", "edge/plainhttp", "edge/xconnect", "edge/tunnel",
		"edge/h2guard", "edge/slowbody", "edge/slowwrite", "edge/h3serve", "edge/h1serve", "edge/overload", "edge/logsample",
	}, external: []string{
		// "All of the above": what the packages above import, go-redis excepted (only
		// limiter/redisstore imports it), and what the edge alone uses.
		"github.com/dunglas/httpsfv", "golang.org/x/time/...", "github.com/quic-go/quic-go/...",
		"github.com/prometheus/client_golang/...", // only edge registers metrics (STYLE.md)
		"go.yaml.in/yaml/v3",                      // the configuration file
	}, tests: []string{"bench", "bench/scenario", "bench/testkit"}},
	// edge's rooms: none knows a listener or go-redis, only edge/metrics (which fills the
	// registry) and edge/admin (which serves it) know Prometheus, and none imports edge,
	// so each can be read and tested on its own.
	{pkg: "edge/config", external: []string{"go.yaml.in/yaml/v3"}}, // the file, validated; knows no server
	// The TCP side of the transport budgets, on quicconn's Guard; config's ip: translated;
	// each source's share of the in-flight cap, its sources cut as limiter's SourcePrefix.
	{pkg: "edge/admission", imports: []string{"limiter", "quicconn", "edge/config"}},
	// The penalty box's configuration from config, and its bans kept in the kernel's filter.
	// It is shown to admin's ban endpoints too (bans.Admin is an admin.BanList).
	{pkg: "edge/bans", imports: []string{"limiter", "edge/config", "edge/admin"}},
	{pkg: "edge/answer", imports: []string{"headers"}}, // the edge's refusals: headers builds the documents
	// Client keys become limiter.Keys; config says what a valid key is and reads keys.file.
	{pkg: "edge/identity", imports: []string{"limiter", "edge/config"}},
	// Compiles config's policies into limiter.Policy and headers.Policy, keyed by identity's sources.
	{pkg: "edge/rules", imports: []string{"headers", "limiter", "edge/config", "edge/identity", "edge/route"}},
	// Decides rules' policies in limiter's stores, writes headers' fields and answer's refusals.
	{pkg: "edge/enforce", imports: []string{"headers", "limiter", "edge/config", "edge/answer", "edge/identity", "edge/rules"},
		tests: []string{"limiter/redisstore"}}, // tests: a Redis store that cannot reach Redis, for on_store_failure
	{pkg: "edge/admin", imports: []string{"edge/config", "limiter"}, external: []string{
		"github.com/prometheus/client_golang/...", // it serves the edge's registry (/metrics)
		"github.com/prometheus/client_model/go",   // the families Gatherer.Gather returns, read for the dashboard
		"go.yaml.in/yaml/v3",                      // GET /api/v1/config?format=yaml
	}},
	// The instrumentation (DESIGN §7): it counts requests itself and reads at scrape time,
	// through hooks, what the rooms count (the policies, the guard, the TCP admission, the
	// penalty box, the pools); it feeds admin's heavy-hitter sketch. quic-go for the
	// QUIC ConnContext it wraps and the HTTP/3 stream its Recorder passes through.
	{pkg: "edge/metrics", imports: []string{"limiter", "quicconn", "edge/admin", "edge/admission", "edge/rules", "edge/upstream"},
		external: []string{"github.com/prometheus/client_golang/...", "github.com/quic-go/quic-go/..."}},
	{pkg: "edge/accesslog"}, // std only: the lines and their writer know nothing of the edge
	// Beyond the table: issue 12's route table and upstream pools, each a room of
	// edge's that needs only the standard library (edge converts the configuration).
	{pkg: "edge/route"},
	{pkg: "edge/upstream"},
	// The HTTP/2 frame guard on the TLS connections (header and write timeouts, abuse),
	// the one room below edge that wraps a listener, as it must see the bytes before
	// Go's HTTP/2 server; a source is charged through a hook, so it knows no penalty
	// box. x/net's HPACK decoder (the one net/http vendors) keeps a copy of the
	// server's dynamic table, to see an HPACK bomb before the server decodes it.
	{pkg: "edge/h2guard", external: []string{"golang.org/x/net/http2/hpack"}},
	// The request-body progress bound: std only.
	{pkg: "edge/slowbody"},
	{pkg: "edge/slowwrite"}, // the standard library only, as slowbody
	{pkg: "edge/logsample"}, // the log lines' per-second bound: std only
	// Overload shedding (limits.max_goroutines, the memory limit): runtime/metrics
	// sampled on its own goroutine, one atomic flag for the listeners and the chain.
	{pkg: "edge/overload", tests: []string{"bench/testkit"}},
	// HTTP/3's stream accept loop over quic-go's RawServerConn, with the header read
	// deadline and the stream budget (a hook) before HEADERS are parsed: quic-go only.
	{pkg: "edge/h3serve", external: []string{"github.com/quic-go/quic-go", "github.com/quic-go/quic-go/http3"},
		tests: []string{"certs", "bench/testkit"}}, // certs.SelfSigned, WaitFor: tests over real QUIC
	// HTTP/1.1 of the TLS port, in place of net/http's loop (issue 16), with net/http's
	// own checks of field names, values and Host (x/net's httpguts, which net/http vendors).
	{pkg: "edge/h1serve", external: []string{"golang.org/x/net/http/httpguts"},
		tests: []string{"certs"}}, // certs.SelfSigned: tests over real TLS
	// http_listen's redirects and ACME HTTP-01 answers (through a hook): std only.
	{pkg: "edge/plainhttp"},
	// The demo origin, a leaf of edge's room (std only) with a row of its own so that
	// bench/scenario's bare baseline serves the very handler h3edge serves.
	{pkg: "edge/demo"},
	// Beyond the table: the GODEBUG that turns on extended CONNECT (WebSocket over
	// HTTP/2) in net/http's HTTP/2 server, set before that server's init reads it. Std
	// only, and nothing in it may import net/http.
	{pkg: "edge/xconnect"},
	// The WebSocket tunnel of an extended CONNECT (std only), apart from xconnect so
	// that xconnect stays free of net/http.
	{pkg: "edge/tunnel"},
	// DESIGN's bench row, split in three: the load generator, the scenarios that drive
	// it, and their charts. None of them imports edge or limiter.
	{pkg: "bench", imports: []string{"headers"}, external: []string{
		// "quic-go http3": http3's Transport takes a quic.Config and a quic.Transport,
		// and its failures are quic-go's error types.
		"github.com/quic-go/quic-go", "github.com/quic-go/quic-go/http3",
		"github.com/HdrHistogram/hdrhistogram-go", // "an HDR histogram for the bench"
		// Beyond the table: the fields checker parses the RateLimit fields h3edge sends
		// (headers only builds them).
		"github.com/dunglas/httpsfv",
	}, tests: []string{"certs", "bench/testkit"}}, // certs.SelfSigned for the test servers
	// The attack clients (h3bench attack): HTTP/2 frames written with x/net/http2's
	// Framer and HPACK encoder (net/http hides frames), QUIC streams with quic-go.
	// quic-initial-flood: hand-built Initials (bench/quicpkt) sent with a source address
	// each through IP_PKTINFO (x/net/ipv4's batched writes).
	{pkg: "bench/attack", imports: []string{"bench/quicpkt"}, external: []string{
		"golang.org/x/net/http2", "golang.org/x/net/http2/hpack", "github.com/quic-go/quic-go",
		"golang.org/x/net/ipv4",
	}, tests: []string{"certs"}},
	{pkg: "bench/scenario", imports: []string{"bench", "bench/attack", "bench/chart", "bench/scenario/flood", "headers",
		"edge/demo",     // the bare baseline serves h3edge's demo origin: "the same handler"
		"certs",         // and a certs.SelfSigned certificate, as h3edge's development one is made
		"bench/testkit", // FreePort and NextPhase, shared with the tests of every package
	}, external: []string{
		// The floods and the bare baseline server speak QUIC and HTTP/3 themselves.
		"github.com/quic-go/quic-go", "github.com/quic-go/quic-go/http3",
		// Beyond the table: drop-cost reads h3edge's /metrics with Prometheus's own
		// text parser (the format package, not client_golang: bench registers nothing).
		"github.com/prometheus/common/expfmt", "github.com/prometheus/common/model",
	}},
	// drop-cost's flooders: raw datagrams (sendmmsg), QUIC handshakes, TCP connects and
	// request streams, each unit one the flooder chose to send; bench for its transports.
	{pkg: "bench/scenario/flood", imports: []string{"bench", "bench/quicpkt"}, external: []string{
		"github.com/quic-go/quic-go", "github.com/quic-go/quic-go/http3", "golang.org/x/net/ipv4",
	}},
	{pkg: "bench/chart", tests: []string{"bench/testkit"}},
	// QUIC v1 client Initials, Retry and server Initials built and read by hand (std
	// only): quic-go exports no packet building, and a forged token or a spoofed source
	// needs every field chosen.
	{pkg: "bench/quicpkt"},
	// Beyond the table: the helpers every package's tests share (free ports, redis-server,
	// waiting, tools required under CI). Std only, so that any row may list it in tests.
	{pkg: "bench/testkit"},
	{pkg: "cmd/h3edge", imports: []string{"edge", "edge/config"}, tests: []string{"bench", "certs", "bench/testkit"}}, // config: load and validate before building
	// bench/attack: the attack-client subcommand runs an attack in a process of its own.
	{pkg: "cmd/h3bench", imports: []string{"bench", "bench/attack", "bench/scenario"}},
	{pkg: "cmd/internal/importcheck"},
}

// imports is what one package of the module imports: its code, and its tests (in
// package and external together).
type imports struct {
	code, tests []string
}

// check returns a problem for each import in pkgs (import path → imports) that the
// rules do not allow, sorted. Code is held to its row. Tests are held to their row's
// module packages plus its tests column, but may import any third-party package: the
// peers and tools they drive (go-redis to fill a Redis, chromedp, h2/h3 framers), none
// of which ends up in a binary.
func check(pkgs map[string]imports) []string {
	var problems []string
	for path, imp := range pkgs {
		rel, ok := relative(path)
		r := ruleOf(rel)
		if !ok || r == nil {
			problems = append(problems, fmt.Sprintf("%s: not a package of DESIGN §2's table (top level as given: cmd, edge, quicconn, limiter, headers, certs, bench)", path))
			continue
		}
		for _, p := range imp.code {
			if !allowed(r, p, false) {
				problems = append(problems, fmt.Sprintf("%s imports %s: %s", rel, p, reason(r, p, false)))
			}
		}
		for _, p := range imp.tests {
			if !allowed(r, p, true) {
				problems = append(problems, fmt.Sprintf("%s's tests import %s: %s", rel, p, reason(r, p, true)))
			}
		}
	}
	slices.Sort(problems)
	return slices.Compact(problems)
}

// relative returns the module-relative path of a package of the module ("" for the
// module's root), and false for a package outside it.
func relative(path string) (string, bool) {
	if path == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// ruleOf returns the rule of the module-relative package rel, or nil.
func ruleOf(rel string) *rule {
	var best *rule
	for i, r := range rules {
		if (rel == r.pkg || strings.HasPrefix(rel, r.pkg+"/")) && (best == nil || len(r.pkg) > len(best.pkg)) {
			best = &rules[i]
		}
	}
	return best
}

// allowed reports whether r's code (or its tests) may import path.
func allowed(r *rule, path string, test bool) bool {
	if std(path) {
		return true
	}
	rel, ok := relative(path)
	if !ok {
		return test || slices.ContainsFunc(r.external, func(pat string) bool { return matches(pat, path) })
	}
	to := ruleOf(rel)
	if to == nil {
		return false
	}
	return to == r || slices.Contains(r.imports, to.pkg) || test && (slices.Contains(r.tests, to.pkg) || to.pkg == testHelpers)
}

// testHelpers is the package of the helpers every package's tests share (free ports,
// redis-server, waiting, tools required under CI): any package's tests may import it.
const testHelpers = "bench/testkit"

// std reports whether path is a package of the standard library: its first element
// has no dot (the test binary's "C" and vendored paths aside, which the module has not).
func std(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// matches reports whether path is pat, or under it if pat ends in "/...".
func matches(pat, path string) bool {
	if base, ok := strings.CutSuffix(pat, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pat
}

// reason says which of DESIGN §2's rules an import breaks: the sentence of "Imports
// point one way" it goes against, if one does, and the row it is outside of.
func reason(r *rule, path string, test bool) string {
	to := ""
	if rel, ok := relative(path); ok {
		if t := ruleOf(rel); t != nil {
			to = t.pkg
		} else {
			to = "?"
		}
	}
	var say string
	switch {
	case to == "edge":
		say = "nothing imports edge but cmd"
	case strings.HasPrefix(path, "github.com/redis/go-redis/"):
		say = "only limiter/redisstore imports go-redis"
	case strings.HasPrefix(path, "github.com/prometheus/"):
		say = "only edge imports Prometheus"
	case r.pkg == "limiter" && to == "limiter/redisstore":
		say = "limiter does not know its Redis store"
	case (r.pkg == "bench" || strings.HasPrefix(r.pkg, "bench/")) && (to == "limiter" || to == "limiter/redisstore"):
		say = "bench never imports edge or limiter"
	case (r.pkg == "headers" || r.pkg == "limiter") && (to == "quicconn" || strings.HasPrefix(path, "github.com/quic-go/")):
		say = "headers and limiter know no server"
	case (r.pkg == "quicconn" || r.pkg == "certs") && matches("github.com/quic-go/quic-go/http3/...", path):
		say = "quicconn and certs know no HTTP server"
	case to == "?":
		say = "it is not a package of the table"
	default:
		say = "not in its row of the table"
	}
	row := append([]string{"std"}, r.imports...)
	row = append(row, r.external...)
	if test {
		row = append(row, r.tests...)
		row = append(row, "any third-party package")
		return fmt.Sprintf("%s (DESIGN §2: %s's tests may import %s)", say, r.pkg, strings.Join(row, ", "))
	}
	return fmt.Sprintf("%s (DESIGN §2: %s imports %s)", say, r.pkg, strings.Join(row, ", "))
}
