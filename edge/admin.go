package edge

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/h3edge/h3edge/edge/config"
)

// The admin API of DESIGN.md §6, on its own listener: metrics, health, the effective
// configuration, reload, the ban list, heavy hitters, and the dashboard. Nothing of it
// is mounted on the public port.
//
// With admin.token set, every endpoint but /healthz, /readyz and the dashboard's static
// files requires "Authorization: Bearer TOKEN" (load-balancer health checks often cannot
// send headers; the dashboard page holds no data and sends the token from its own
// fetches). Without a token the listener is loopback-only (Config.Validate and
// startAdmin refuse otherwise) and answers only requests whose Host is a loopback name,
// so a web page cannot reach it through DNS rebinding. State-changing requests from
// other origins are refused (http.CrossOriginProtection).

//go:embed ui
var uiFiles embed.FS

// adminBan is one entry of the penalty box as the admin API shows it.
type adminBan struct {
	// Prefix is the banned source prefix (per ip.ipv4_prefix / ip.ipv6_prefix).
	Prefix netip.Prefix `json:"prefix"`
	// Since and Until bound the ban.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until"`
	// Reason is "abuse" (rejections over abuse.rejections) or "manual" (the admin
	// API), or the reason given when banned through the API.
	Reason string `json:"reason"`
	// Strikes counts the source's bans in a row; each doubles the ban's length.
	Strikes int `json:"strikes,omitempty"`
}

// banList is the penalty box as the admin API uses it; boxBans adapts the server's
// penalty.Box to it.
type banList interface {
	// List returns the bans in force at now.
	List(now time.Time) []adminBan
	// Add bans p from now for d; banning a banned prefix replaces its ban.
	Add(ctx context.Context, p netip.Prefix, now time.Time, d time.Duration, reason string) (adminBan, error)
	// Lift ends p's ban at once, reporting whether there was one.
	Lift(ctx context.Context, p netip.Prefix) (bool, error)
}

// banCounter is what a penalty box reports for bans_active and bans_total if it counts
// them itself; otherwise bans_active is len(List) and bans_total 0.
type banCounter interface {
	Counts() (active int, total uint64)
}

// banRequest is the body of POST /api/v1/bans.
type banRequest struct {
	// Prefix is a prefix such as "203.0.113.0/24", or one address (its /32 or /128).
	Prefix string `json:"prefix"`
	// Duration is a Go duration such as "10m", at most 720h. If empty, abuse.ban.
	Duration string `json:"duration"`
	// Reason is shown in the ban list. If empty, "manual".
	Reason string `json:"reason"`
}

// maxAdminBan bounds a ban set through the API, like abuse.max_ban.
const maxAdminBan = 720 * time.Hour

// admin serves the admin API of one Server.
type admin struct {
	s      *Server
	m      *metrics
	gather prometheus.Gatherer
	// reload applies the configuration anew (Server.reloadConfig). It returns an error
	// only when it kept the running configuration.
	reload func() error
	now    func() time.Time
	h      http.Handler
}

// adminHandler returns the admin API of s: its metrics come from reg, on which m is
// registered; the ban list is m.bans.
func (s *Server) adminHandler(reg *prometheus.Registry, m *metrics) http.Handler {
	return s.newAdmin(reg, m)
}

// newAdmin builds the admin API of s over any Gatherer.
func (s *Server) newAdmin(g prometheus.Gatherer, m *metrics) *admin {
	a := &admin{s: s, m: m, gather: g, now: time.Now, reload: s.reloadConfig}
	a.h = http.NewCrossOriginProtection().Handler(a.routes())
	return a
}

// routes maps the admin paths of DESIGN.md §6, plus /api/v1/stats for the dashboard.
func (a *admin) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.gather, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(a.s.log.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /api/v1/config", a.config)
	mux.HandleFunc("POST /api/v1/reload", a.reloadConfig)
	mux.HandleFunc("GET /api/v1/bans", a.listBans)
	mux.HandleFunc("POST /api/v1/bans", a.addBan)
	mux.HandleFunc("DELETE /api/v1/bans/{prefix...}", a.liftBan)
	mux.HandleFunc("GET /api/v1/top", a.top)
	mux.HandleFunc("GET /api/v1/stats", a.stats)
	ui, _ := fs.Sub(uiFiles, "ui")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", uiHandler(http.FileServerFS(ui))))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	return mux
}

// uiHandler adds the dashboard's security headers: it loads nothing from elsewhere and
// cannot be framed.
func uiHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP checks the caller, then routes.
func (a *admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	token := a.s.config().Admin.Token
	if token == "" && !loopbackHost(r.Host) {
		writeAdminProblem(w, http.StatusMisdirectedRequest, "the admin API without admin.token answers only to a loopback host name", nil)
		return
	}
	if token != "" && !publicAdminPath(r.URL.Path) && !bearerMatches(r, token) {
		h.Set("WWW-Authenticate", `Bearer realm="h3edge admin"`)
		writeAdminProblem(w, http.StatusUnauthorized, "send Authorization: Bearer with admin.token", nil)
		return
	}
	a.h.ServeHTTP(w, r)
}

// publicAdminPath reports whether path is served without the token: health, and the
// dashboard's static files.
func publicAdminPath(path string) bool {
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

// adminProblem is an RFC 9457 problem document with the list of errors of a refused
// reload.
type adminProblem struct {
	Type   string   `json:"type"`
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail,omitempty"`
	Errors []string `json:"errors,omitempty"`
}

// writeAdminProblem answers with a problem document; errs lists a refused reload's
// problems.
func writeAdminProblem(w http.ResponseWriter, status int, detail string, errs []string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(adminProblem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: detail, Errors: errs})
}

// writeAdminJSON answers v as indented JSON.
func writeAdminJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// healthz answers while the process runs.
func (a *admin) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// readiness is the body of /readyz.
type readiness struct {
	// Status is "ready", "degraded" (serving, but the store's breaker is open and
	// decisions follow on_store_failure) or "not_ready" (503).
	Status string `json:"status"`
	// Listeners is "up", "down" (not bound yet) or "shutting_down".
	Listeners string `json:"listeners"`
	// Store is "local" (quota in memory), "ok" or "breaker_open".
	Store string `json:"store"`
}

// readyz answers 200 while the public sockets are bound and the server is not shutting
// down, so a load balancer stops sending traffic as soon as draining begins.
func (a *admin) readyz(w http.ResponseWriter, r *http.Request) {
	rd := readiness{Status: "ready", Listeners: "up", Store: "local"}
	a.s.mu.Lock()
	shutting := a.s.shutdown
	a.s.mu.Unlock()
	switch {
	case shutting:
		rd.Listeners = "shutting_down"
	case a.s.altSvcValue.Load() == nil: // set by Listen once both sockets are bound
		rd.Listeners = "down"
	}
	if a.m != nil && a.m.breaker != nil {
		rd.Store = "ok"
		if a.m.breakerOpen() {
			rd.Store, rd.Status = "breaker_open", "degraded"
		}
	}
	status := http.StatusOK
	if rd.Listeners != "up" {
		rd.Status, status = "not_ready", http.StatusServiceUnavailable
	}
	writeAdminJSON(w, status, rd)
}

// config answers the effective configuration with its secrets redacted, keyed as in
// the configuration file: JSON, or YAML with ?format=yaml.
func (a *admin) config(w http.ResponseWriter, r *http.Request) {
	doc, err := yaml.Marshal(a.s.config().Redacted())
	if err != nil {
		writeAdminProblem(w, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	if r.URL.Query().Get("format") == "yaml" {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(doc)
		return
	}
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		writeAdminProblem(w, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	writeAdminJSON(w, http.StatusOK, v)
}

// reloadSummary is the body of a successful POST /api/v1/reload.
type reloadSummary struct {
	Status   string   `json:"status"` // "reloaded"
	File     string   `json:"file"`
	Policies []string `json:"policies"`
}

// reloadConfig applies the configuration file anew: 200 with a summary, or 422 with
// every problem when the new configuration is refused and the running one stays.
func (a *admin) reloadConfig(w http.ResponseWriter, r *http.Request) {
	if err := a.reload(); err != nil {
		writeAdminProblem(w, http.StatusUnprocessableEntity,
			"the new configuration was refused; the running one is unchanged", errorLines(err))
		return
	}
	sum := reloadSummary{Status: "reloaded", File: a.s.config().File, Policies: []string{}}
	if rs := a.s.rules.Load(); rs != nil {
		for _, p := range rs.Policies {
			sum.Policies = append(sum.Policies, p.Name)
		}
	}
	writeAdminJSON(w, http.StatusOK, sum)
}

// errorLines flattens an error into one line per problem: the FieldErrors of a
// ValidationError, the members of joined errors, else the lines of its message.
func errorLines(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		for line := range strings.SplitSeq(err.Error(), "\n") {
			if line != "" {
				out = append(out, line)
			}
		}
	}
	walk(err)
	return out
}

// banList returns the penalty box, or answers 501 and returns nil when the admin API
// has none (New always gives it boxBans).
func (a *admin) banList(w http.ResponseWriter) banList {
	if a.m == nil || a.m.bans == nil {
		writeAdminProblem(w, http.StatusNotImplemented, "the penalty box is not available in this build", nil)
		return nil
	}
	return a.m.bans
}

// banListBody is the body of GET /api/v1/bans.
type banListBody struct {
	Bans []adminBan `json:"bans"`
}

// listBans answers the bans in force.
func (a *admin) listBans(w http.ResponseWriter, r *http.Request) {
	bl := a.banList(w)
	if bl == nil {
		return
	}
	bans := bl.List(a.now())
	if bans == nil {
		bans = []adminBan{}
	}
	writeAdminJSON(w, http.StatusOK, banListBody{Bans: bans})
}

// addBan bans a prefix: 201 with the ban.
func (a *admin) addBan(w http.ResponseWriter, r *http.Request) {
	bl := a.banList(w)
	if bl == nil {
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeAdminProblem(w, http.StatusUnsupportedMediaType, "send the ban as application/json", nil)
		return
	}
	var req banRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeAdminProblem(w, http.StatusBadRequest, "reading the ban: "+err.Error(), nil)
		return
	}
	p, ok := config.ParsePrefix(req.Prefix)
	if !ok {
		writeAdminProblem(w, http.StatusBadRequest, fmt.Sprintf("prefix: want an address or a CIDR prefix such as 203.0.113.0/24 (got %q)", req.Prefix), nil)
		return
	}
	d := a.s.config().Abuse.Ban
	if req.Duration != "" {
		var err error
		if d, err = time.ParseDuration(req.Duration); err != nil || d <= 0 || d > maxAdminBan {
			writeAdminProblem(w, http.StatusBadRequest, fmt.Sprintf("duration: want a duration such as 10m, more than 0 and at most 720h (got %q)", req.Duration), nil)
			return
		}
	}
	reason := req.Reason
	if reason == "" {
		reason = "manual"
	}
	if len(reason) > 200 || !config.ValidKey(reason) {
		writeAdminProblem(w, http.StatusBadRequest, "reason: at most 200 bytes, no control characters", nil)
		return
	}
	b, err := bl.Add(r.Context(), p, a.now(), d, reason)
	if err != nil {
		writeAdminProblem(w, http.StatusServiceUnavailable, "banning failed: "+err.Error(), nil)
		return
	}
	a.s.log.Info("admin: ban", "prefix", p, "until", b.Until, "reason", reason)
	w.Header().Set("Location", "/api/v1/bans/"+p.String())
	writeAdminJSON(w, http.StatusCreated, b)
}

// liftBan ends a ban: 204, or 404 when the prefix is not banned. The prefix is the rest
// of the path (203.0.113.0/24, its slash escaped or not, or one address).
func (a *admin) liftBan(w http.ResponseWriter, r *http.Request) {
	bl := a.banList(w)
	if bl == nil {
		return
	}
	raw := r.PathValue("prefix")
	p, ok := config.ParsePrefix(raw)
	if !ok {
		writeAdminProblem(w, http.StatusBadRequest, fmt.Sprintf("want an address or a CIDR prefix such as 203.0.113.0/24 (got %q)", raw), nil)
		return
	}
	found, err := bl.Lift(r.Context(), p)
	switch {
	case err != nil:
		writeAdminProblem(w, http.StatusServiceUnavailable, "lifting the ban failed: "+err.Error(), nil)
	case !found:
		writeAdminProblem(w, http.StatusNotFound, p.String()+" is not banned", nil)
	default:
		a.s.log.Info("admin: ban lifted", "prefix", p)
		w.WriteHeader(http.StatusNoContent)
	}
}

// topKeyRow is a heavy client key: its hash, never the key.
type topKeyRow struct {
	// Key is the client key's hash (keyed SHA-256, truncated to 16 bytes), in hex.
	Key string `json:"key"`
	// PK is its first 8 bytes as the RateLimit field's pk parameter carries them.
	PK string `json:"pk"`
	// Count estimates the key's requests (recent ones weigh more, see HalfLife); it
	// overestimates by at most Error.
	Count uint64 `json:"count"`
	Error uint64 `json:"error"`
}

// topSourceRow is a heavy source prefix.
type topSourceRow struct {
	Prefix string `json:"prefix"`
	Count  uint64 `json:"count"`
	Error  uint64 `json:"error"`
}

// topBody is the body of /api/v1/top.
type topBody struct {
	// HalfLife is how fast counts fade: traffic that old counts half.
	HalfLife string `json:"half_life"`
	// SourceSample is the sampling of sources: one request in it is looked at.
	SourceSample int            `json:"source_sample"`
	Keys         []topKeyRow    `json:"keys"`
	Sources      []topSourceRow `json:"sources"`
}

// topRows reads the n heaviest keys and sources from the sketches.
func (a *admin) topRows(n int) topBody {
	b := topBody{HalfLife: topHalfLife.String(), SourceSample: int(a.m.top.sources.sampleMask) + 1,
		Keys: []topKeyRow{}, Sources: []topSourceRow{}}
	for _, h := range a.m.top.keys.top(n) {
		b.Keys = append(b.Keys, topKeyRow{Key: hex.EncodeToString(h.Key[:]),
			PK: ":" + base64.StdEncoding.EncodeToString(h.Key[:8]) + ":", Count: h.Count, Error: h.Err})
	}
	for _, h := range a.m.top.sources.top(n) {
		b.Sources = append(b.Sources, topSourceRow{Prefix: h.Key.String(), Count: h.Count, Error: h.Err})
	}
	return b
}

// top answers the n heaviest client keys and source prefixes (n from 1 to 1024,
// default 20).
func (a *admin) top(w http.ResponseWriter, r *http.Request) {
	n := 20
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > topCapacity {
			writeAdminProblem(w, http.StatusBadRequest, fmt.Sprintf("n: want 1 to %d (got %q)", topCapacity, v), nil)
			return
		}
	}
	writeAdminJSON(w, http.StatusOK, a.topRows(n))
}

// statsBody is the body of /api/v1/stats, the dashboard's one poll: cumulative
// counters (the page derives rates) and current state.
type statsBody struct {
	Time time.Time `json:"time"`
	// Requests counts answered requests by protocol: total and by status class, with
	// 429 apart from the other 4xx. The stream budget's prebuilt 429s on HTTP/1.1 and
	// HTTP/2 are answers too: they are in total and 429 here, as in
	// refused_streams_total (not in requests_total). HTTP/3 refusals are stream
	// resets, not 429s: they are in transport.refused_streams only.
	Requests  map[string]map[string]uint64 `json:"requests"`
	Inflight  int64                        `json:"inflight"`
	Decisions []decisionRow                `json:"decisions"`
	Transport transportBody                `json:"transport"`
	Store     storeBody                    `json:"store"`
	Bans      bansBody                     `json:"bans"`
	Top       topBody                      `json:"top"`
}

type transportBody struct {
	DroppedDatagrams   uint64            `json:"dropped_datagrams"`
	RefusedConnections map[string]uint64 `json:"refused_connections"` // by h3, tcp
	RefusedStreams     map[string]uint64 `json:"refused_streams"`     // by h1, h2, h3
	TrackedSources     int               `json:"tracked_sources"`
	OpenConnections    int               `json:"open_connections"`
}

type storeBody struct {
	Kind   string `json:"kind"`  // "local" or "shared"
	State  string `json:"state"` // "ok" or "breaker_open"
	Errors uint64 `json:"errors"`
}

type bansBody struct {
	Available bool       `json:"available"` // false without a penalty box (New always has one)
	Active    int        `json:"active"`
	Total     uint64     `json:"total"`
	List      []adminBan `json:"list"` // the first 100
}

// stats answers everything the dashboard shows, in one document.
func (a *admin) stats(w http.ResponseWriter, r *http.Request) {
	m := a.m
	now := a.now()
	b := statsBody{Time: now, Requests: map[string]map[string]uint64{}, Inflight: a.s.inflight.Load(),
		Decisions: m.decisions(), Top: a.topRows(10)}
	for p := range m.requests {
		c := map[string]uint64{"total": 0, "2xx": 0, "3xx": 0, "4xx": 0, "429": 0, "5xx": 0}
		for i := range m.requests[p] {
			v := m.requests[p][i].Load()
			code := minCode + i
			c["total"] += v
			switch {
			case code == http.StatusTooManyRequests:
				c["429"] += v
			case code >= 200:
				c[strconv.Itoa(code/100)+"xx"] += v
			}
		}
		if p != protoH3 {
			var refused uint64
			for r := range m.refusedStr[p] {
				refused += m.refusedStr[p][r].Load()
			}
			c["total"] += refused
			c["429"] += refused
		}
		b.Requests[protoNames[p]] = c
	}
	t := m.transport()
	b.Transport = transportBody{DroppedDatagrams: t.DroppedBanned, TrackedSources: t.Tracked, OpenConnections: t.Open,
		RefusedConnections: map[string]uint64{}, RefusedStreams: map[string]uint64{}}
	for _, c := range m.refusedConns() {
		b.Transport.RefusedConnections[c.proto] += c.n
	}
	for p := range m.refusedStr {
		for r := range m.refusedStr[p] {
			b.Transport.RefusedStreams[protoNames[p]] += m.refusedStr[p][r].Load()
		}
	}
	b.Store = storeBody{Kind: "local", State: "ok", Errors: m.storeErrs.Load()}
	if m.breaker != nil {
		b.Store.Kind = "shared"
	}
	if m.breakerOpen() {
		b.Store.State = "breaker_open"
	}
	b.Bans.List = []adminBan{}
	if m.bans != nil {
		b.Bans.Available = true
		b.Bans.Active, b.Bans.Total = m.banCounts()
		list := m.bans.List(now)
		b.Bans.List = list[:min(len(list), 100)]
	}
	if b.Decisions == nil {
		b.Decisions = []decisionRow{}
	}
	writeAdminJSON(w, http.StatusOK, b)
}

// adminServer is the admin listener: plain HTTP on its own address, never the public
// one. Like net/http, serve returns http.ErrServerClosed after shutdown or close. A nil
// *adminServer (admin.listen: off) does nothing.
type adminServer struct {
	ln  net.Listener
	srv *http.Server
}

// errAdminExposed refuses an admin listener reachable from other machines without a
// token. Config.Validate reports it first; this is the last guard.
var errAdminExposed = errors.New("edge: admin listener is not on a loopback address and admin.token is empty")

// startAdmin binds the admin listener of c for h. With c.Listen "off" it returns nil
// and no error.
func startAdmin(c config.AdminConfig, h http.Handler, log *slog.Logger) (*adminServer, error) {
	if c.Listen == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("edge: admin listen %s: %w", c.Listen, err)
	}
	if ta, ok := ln.Addr().(*net.TCPAddr); c.Token == "" && (!ok || !ta.IP.IsLoopback()) {
		ln.Close()
		return nil, errAdminExposed
	}
	if log == nil {
		log = slog.Default()
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return &adminServer{ln: ln, srv: srv}, nil
}

// addr is the bound address; nil when off.
func (a *adminServer) addr() net.Addr {
	if a == nil {
		return nil
	}
	return a.ln.Addr()
}

// serve serves until shutdown or close, then returns http.ErrServerClosed.
func (a *adminServer) serve() error {
	if a == nil {
		return http.ErrServerClosed
	}
	return a.srv.Serve(a.ln)
}

// shutdown stops accepting and waits for the admin requests in flight until ctx ends.
func (a *adminServer) shutdown(ctx context.Context) error {
	if a == nil {
		return nil
	}
	err := a.srv.Shutdown(ctx)
	a.ln.Close() // when serve never ran
	return err
}

// close stops at once.
func (a *adminServer) close() error {
	if a == nil {
		return nil
	}
	err := a.srv.Close()
	a.ln.Close()
	return err
}
