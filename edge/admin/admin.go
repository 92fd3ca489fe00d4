// Package admin is h3edge's admin API (DESIGN.md §6) on a listener of its own: metrics,
// health, the effective configuration, reload, the ban list, heavy hitters (Top) and
// the dashboard. It knows the edge only through the hook fields of Handler, which the
// edge fills, in the manner of httputil.ReverseProxy; nothing of it is mounted on the
// public port.
package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/h3edge/h3edge/edge/config"
)

// Handler serves the admin API. Set its fields before the first request and do not
// change them afterwards; it is then safe for concurrent use.
//
// With admin.token set (Config().Admin.Token, read per request so that a reload
// applies it), every endpoint but /healthz, /readyz and the dashboard's static files
// requires "Authorization: Bearer TOKEN" (load-balancer health checks often cannot
// send headers; the dashboard page holds no data and sends the token from its own
// fetches). Without a token the listener is loopback-only (config.Validate and Listen
// refuse otherwise) and answers only requests whose Host is a loopback name, so a web
// page cannot reach it through DNS rebinding. State-changing requests from other
// origins are refused (http.CrossOriginProtection).
type Handler struct {
	// Config returns the configuration in force: the token, the default ban length
	// (abuse.ban), and what GET /api/v1/config shows, redacted. It must not be nil.
	Config func() *config.Config

	// Reload applies the configuration anew, as SIGHUP does. It returns an error, one
	// line per problem (joined errors, or lines of its message), only when it kept
	// the running configuration: POST /api/v1/reload then answers 422 with them. If
	// nil, POST /api/v1/reload answers 501.
	Reload func() error

	// Ready reports the state /readyz answers and the dashboard shows. If nil, the
	// listeners are taken as up and quota as local.
	Ready func() Readiness

	// Bans is the penalty box behind /api/v1/bans. If nil, the ban endpoints answer
	// 501 and the dashboard shows no bans.
	Bans BanList

	// Top holds the heavy hitters behind /api/v1/top. If nil, it lists none.
	Top *Top

	// Gatherer is what GET /metrics exposes, and where the dashboard's counters
	// (GET /api/v1/stats) are read from, so both always agree. If nil, there are none.
	Gatherer prometheus.Gatherer

	// Connections returns the open connections, QUIC and TCP, for the dashboard. If
	// nil, 0.
	Connections func() int

	// Extra mounts further endpoints beside the API's own, keyed by http.ServeMux
	// pattern ("GET /api/v1/certificates"), behind the same token and origin checks.
	// A pattern that conflicts with one of the API's panics at the first request, as
	// http.ServeMux.Handle does.
	Extra map[string]http.Handler

	// Logger receives the bans and unbans made through the API and the exposition's
	// errors. If nil, slog.Default() is used.
	Logger *slog.Logger

	once sync.Once
	mux  http.Handler
}

//go:embed ui
var uiFiles embed.FS

// logger returns Logger or the default.
func (h *Handler) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

// routes maps the admin paths of DESIGN.md §6, plus /api/v1/stats for the dashboard
// and Extra.
func (h *Handler) routes() http.Handler {
	g := h.Gatherer
	if g == nil {
		g = prometheus.Gatherers{}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(h.logger().Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.HandleFunc("GET /api/v1/config", h.config)
	mux.HandleFunc("POST /api/v1/reload", h.reload)
	mux.HandleFunc("GET /api/v1/bans", h.listBans)
	mux.HandleFunc("POST /api/v1/bans", h.addBan)
	mux.HandleFunc("DELETE /api/v1/bans/{prefix...}", h.liftBan)
	mux.HandleFunc("GET /api/v1/top", h.top)
	mux.HandleFunc("GET /api/v1/stats", h.stats)
	ui, _ := fs.Sub(uiFiles, "ui")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", uiHeaders(http.FileServerFS(ui))))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	for pattern, eh := range h.Extra {
		mux.Handle(pattern, eh)
	}
	return http.NewCrossOriginProtection().Handler(mux)
}

// uiHeaders adds the dashboard's security headers: it loads nothing from elsewhere and
// cannot be framed.
func uiHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		hd.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP checks the caller, then routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.once.Do(func() { h.mux = h.routes() })
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	token := h.Config().Admin.Token
	if token == "" && !loopbackHost(r.Host) {
		writeProblem(w, http.StatusMisdirectedRequest, "the admin API without admin.token answers only to a loopback host name", nil)
		return
	}
	if token != "" && !publicPath(r.URL.Path) && !bearerMatches(r, token) {
		hd.Set("WWW-Authenticate", `Bearer realm="h3edge admin"`)
		writeProblem(w, http.StatusUnauthorized, "send Authorization: Bearer with admin.token", nil)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// publicPath reports whether path is served without the token: health, and the
// dashboard's static files.
func publicPath(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/")
}

// bearerMatches compares the request's bearer token with token in constant time.
// Both are hashed first, so neither the length nor a common prefix leaks.
func bearerMatches(r *http.Request, token string) bool {
	v := r.Header.Get("Authorization")
	if len(v) < 7 || !strings.EqualFold(v[:7], "bearer ") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(v[7:])))
	want := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// loopbackHost reports whether a Host field names this machine's loopback: an address
// of 127.0.0.0/8 or ::1, or localhost. An empty Host (HTTP/1.0) is not a browser's.
func loopbackHost(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	a, err := netip.ParseAddr(host)
	return host == "localhost" || err == nil && a.IsLoopback()
}
