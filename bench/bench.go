// Package bench is h3edge's load generator: HTTP/3, HTTP/2 and HTTP/1.1 over many real
// connections and local source addresses, closed loop or open loop at a fixed rate, with
// latencies in an HDR histogram, RateLimit field checks on every response and clients
// that can pace themselves by those fields. It is a client only: it never imports the
// server's packages, so what it measures is what any client would see. The scenarios
// that drive it are in bench/scenario, their SVG charts in bench/chart.
//
// At about 2 200 lines it is a little over the module's ~2 000 and stays one package:
// the field checks (fields.go) and the pacing by those fields run inside each
// client's request loop and feed the same Result, so a sub-package would export the
// loop's internals only to call them back; each concern has its own file instead.
package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Proto selects the HTTP version.
type Proto string

// The protocols.
const (
	H3 Proto = "h3" // HTTP/3 over QUIC
	H2 Proto = "h2" // HTTP/2 over TLS
	H1 Proto = "h1" // HTTP/1.1, over TLS (https) or clear text (http)
)

// Bounds that catch typos before they exhaust the machine.
const (
	maxConnections = 100_000
	maxWorkers     = 1_000_000
	maxKeys        = 100_000_000
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("bench: invalid configuration")

// ResponseHook sees every response as soon as its header has arrived, before the body
// is read, including warm-up responses. It runs on the worker goroutines, concurrently,
// and must not read or close resp.Body. It returns how long the worker should pause
// before its next request (0: no pause); in open loop the paused worker's share of the
// schedule is taken by the others, still measured from the intended send times.
//
// The RateLimit field checks (Result.Fields) and Config.RespectLimits run at the same
// point, before the hook, with what a hook cannot see: the request's send time and the
// client key it went under.
type ResponseHook func(resp *http.Response) (pause time.Duration)

// RequestHook sees every measured request once it has ended (its body read, or its
// failure), on the worker goroutine that sent it, concurrently: when it was meant to
// leave (where Latency counts from: the intended send time in open loop, the send in
// closed loop), its latency, and its status, 0 if it failed. A run's time series are
// built on it.
type RequestHook func(at time.Time, latency time.Duration, status int)

// Config describes a run. The zero value of each field has the meaning stated; Run
// resolves the defaults and Validate checks the rest.
type Config struct {
	// URL is the target: https://host[:port]/path (http:// only with H1). Required. A
	// host name is resolved once, at the start.
	URL string
	// Proto is H3, H2 or H1. If empty, H3 is used.
	Proto Proto
	// Connections is how many client connections are kept open. If zero, 1 is used;
	// at most 100000.
	Connections int
	// Streams is how many requests each connection keeps in flight. If zero, 1 is used.
	// HTTP/1.1 carries one request at a time, so with H1 each connection becomes Streams
	// connections: Connections × Streams TCP connections in all.
	Streams int
	// Duration is the measured period, after Warmup. If zero and Requests is zero, 10s
	// is used; if zero and Requests is set, only Requests ends the run.
	Duration time.Duration
	// Requests ends the run after this many measured requests (warm-up requests not
	// counted). With Duration too, whichever comes first ends the run. Zero: no count.
	Requests int64
	// Rate, if positive, runs open loop: Rate requests per second over all connections,
	// intended send times spread evenly (see Pacer), latency measured from each
	// request's intended send time. Connections × Streams bounds how many can be in
	// flight. Zero runs closed loop: each worker sends its next request when its
	// previous one ends.
	Rate float64
	// Sources are local addresses to bind, round-robin: connection i uses
	// Sources[i % len(Sources)]. If empty, the system picks the source.
	Sources []netip.Addr
	// Header is sent with every request; a "Host" entry sets the request's Host.
	Header http.Header
	// Method is the request method. If empty, GET is used.
	Method string
	// BodySize is the request body's length in bytes. Zero: no body.
	BodySize int
	// Keys, if positive, sends one of Keys API keys ("k-000000", "k-000001", …) in
	// KeyHeader on every request. Zero: no key.
	Keys int
	// KeyHeader names the API key field. If empty, "X-API-Key" is used.
	KeyHeader string
	// Zipf, if above 1, draws keys from a Zipf law with this exponent (k-000000 the
	// most frequent). Zero draws them uniformly. Values in (0, 1] are invalid.
	Zipf float64
	// Timeout bounds each request: dial, handshake, waiting for a stream, response and
	// body. If zero, 5s is used.
	Timeout time.Duration
	// Warmup is a period at the start whose requests are sent but not measured. Zero:
	// none.
	Warmup time.Duration
	// RootCAs verifies the server's chain. If nil, the system roots are used.
	RootCAs *x509.CertPool
	// Pins, if any, replace chain and host name verification: the server's leaf
	// certificate must have one of these SPKI pins (base64 SHA-256, see SPKIPin).
	Pins []string
	// Insecure skips certificate verification; Pins, if any, are still enforced.
	Insecure bool
	// OnResponse, if set, sees every response (see ResponseHook). Nil costs nothing.
	OnResponse ResponseHook
	// OnMeasured, if set, sees every measured request once it has ended (see
	// RequestHook). Nil costs nothing.
	OnMeasured RequestHook
	// RespectLimits makes the clients pace themselves by the RateLimit fields, per
	// client key (source address and API key): after a response with r=0 a key sends
	// nothing for that item's t, after a 429 nothing for Retry-After, and it keeps no
	// more requests in flight than the last r allows (one, to learn the new r, once r
	// is used up). A request that waits is measured from its intended send time in open
	// loop and from when it leaves in closed loop; Result.Respect counts the waits.
	// False: responses do not change what is sent.
	RespectLimits bool
	// Progress, if set, receives a progress line every second, rewritten in place with
	// "\r": meant for a terminal. Nil: none.
	Progress io.Writer
}

// Validate reports the first problem in c, wrapping ErrConfig. Zero values are valid.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return bad("URL is required")
	case err != nil:
		return bad("URL: %v", err)
	case u.Hostname() == "":
		return bad("URL %q has no host", c.URL)
	}
	switch c.Proto {
	case "", H3, H2:
		if u.Scheme != "https" {
			return bad("URL %q: %s needs https", c.URL, c.proto())
		}
	case H1:
		if u.Scheme != "https" && u.Scheme != "http" {
			return bad("URL %q: scheme must be https or http", c.URL)
		}
	default:
		return bad("proto %q: want h3, h2 or h1", c.Proto)
	}
	switch {
	case c.Connections < 0 || c.Connections > maxConnections:
		return bad("connections %d: want 1 to %d", c.Connections, maxConnections)
	case c.Streams < 0:
		return bad("streams %d: want at least 1", c.Streams)
	case max(c.Connections, 1)*max(c.Streams, 1) > maxWorkers:
		return bad("connections × streams above %d", maxWorkers)
	case c.Duration < 0 || c.Requests < 0 || c.Warmup < 0 || c.Timeout < 0:
		return bad("negative duration, request count, warm-up or timeout")
	case c.Rate < 0:
		return bad("rate %g: must not be negative", c.Rate)
	case c.BodySize < 0:
		return bad("body size %d: must not be negative", c.BodySize)
	case c.Keys < 0 || c.Keys > maxKeys:
		return bad("keys %d: want 0 to %d", c.Keys, maxKeys)
	case c.Zipf != 0 && !(c.Zipf > 1):
		return bad("zipf %g: want an exponent above 1, or 0 for uniform", c.Zipf)
	case c.Method != "" && !isToken(c.Method):
		return bad("method %q is not a token", c.Method)
	case c.KeyHeader != "" && !isToken(c.KeyHeader):
		return bad("key header %q is not a field name", c.KeyHeader)
	}
	for i, a := range c.Sources {
		if !a.IsValid() || a.Unmap().Is4() != c.Sources[0].Unmap().Is4() {
			return bad("sources: %v: mixed or invalid address families", c.Sources[i])
		}
	}
	for name := range c.Header {
		if !isToken(name) {
			return bad("header name %q is not a token", name)
		}
	}
	if _, err := parsePins(c.Pins); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

func (c *Config) proto() Proto {
	if c.Proto == "" {
		return H3
	}
	return c.Proto
}

// withDefaults returns c with every zero value that has a default resolved.
func (c Config) withDefaults() Config {
	c.Proto = c.proto()
	c.Connections = max(c.Connections, 1)
	c.Streams = max(c.Streams, 1)
	if c.Duration == 0 && c.Requests == 0 {
		c.Duration = 10 * time.Second
	}
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	if c.KeyHeader == "" {
		c.KeyHeader = "X-API-Key"
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	return c
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// ParseHeader parses a "Name: value" command-line header.
func ParseHeader(s string) (name, value string, err error) {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || !isToken(name) {
		return "", "", fmt.Errorf("%w: header %q: want \"Name: value\"", ErrConfig, s)
	}
	return textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value), nil
}

// Run sends the load c describes and returns what it measured. Connection and request
// failures are counted in the Result, not returned; Run fails only on a bad Config or
// when it cannot set up (resolve the host, bind a source address). It stops by itself:
// after Duration or Requests, each request bounded by Timeout. If ctx ends first, Run
// stops early and returns the results so far together with ctx's error.
func Run(ctx context.Context, c Config) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	r, err := newRun(ctx, c)
	if err != nil {
		return nil, err
	}
	defer r.close()
	return r.run(ctx)
}

// Conns are the client connections of a Config without Run's load, for a caller that
// sends and times its own requests (the Redis scenarios, across several edges).
// Connection i is from Sources[i % len(Sources)]; it dials on first use and redials
// when it is lost, as in Run. The Config's schedule, keys, header, hooks and field
// checks play no part. Safe for concurrent use.
type Conns struct {
	r *run
}

// Dial validates c, resolves its target and defaults and sets up its connections as
// Run does (Connections of them; with H1, Connections × Streams), sending nothing.
func Dial(ctx context.Context, c Config) (*Conns, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r, err := newRun(ctx, c.withDefaults())
	if err != nil {
		return nil, err
	}
	return &Conns{r: r}, nil
}

// Len returns the number of connections.
func (c *Conns) Len() int { return len(c.r.clients) }

// RoundTrip sends req over connection i, 0 ≤ i < Len.
func (c *Conns) RoundTrip(i int, req *http.Request) (*http.Response, error) {
	return c.r.clients[i].roundTrip(req)
}

// Close closes the connections and their sockets.
func (c *Conns) Close() { c.r.close() }

// run is one Run in progress.
type run struct {
	cfg       Config
	url       *url.URL
	host      string // request Host, from Header["Host"]; "" uses the URL's
	header    http.Header
	body      []byte
	keyNames  []string
	clients   []client
	srcNames  []string // per client: its source address, "" if the system picks it
	fields    *fieldChecker
	respect   *respecter // nil unless Config.RespectLimits
	perClient int        // workers sharing one client
	udp       []*net.UDPConn
	quic      []*quic.Transport
	shards    []*shard

	start, warmEnd, end time.Time
	pacer               Pacer
	stopAt              int64        // open loop with Requests: first index not sent
	next                atomic.Int64 // open loop: next schedule index; closed: measured claims
	// unsent counts measured open-loop requests that were claimed but never sent: the
	// run ended first (or the fields held them back until it did).
	unsent atomic.Int64

	// Live counters for the progress line, warm-up included.
	done, failed, got429 atomic.Int64
}

func newRun(ctx context.Context, c Config) (_ *run, err error) {
	u, _ := url.Parse(c.URL) // checked by Validate
	r := &run{cfg: c, url: u, header: c.Header.Clone(), fields: newFieldChecker()}
	if c.RespectLimits {
		r.respect = newRespecter()
	}
	if r.header == nil {
		r.header = make(http.Header)
	}
	if h := r.header.Get("Host"); h != "" {
		r.host = h
		r.header.Del("Host")
	}
	if c.BodySize > 0 {
		r.body = bytes.Repeat([]byte{'x'}, c.BodySize)
	}
	if c.Keys > 0 {
		r.keyNames = keyNames(c.Keys)
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()

	dst, err := resolve(ctx, u, c.Sources)
	if err != nil {
		return nil, err
	}
	tc, err := TLSConfig(u.Hostname(), c.RootCAs, c.Pins, c.Insecure)
	if err != nil {
		return nil, err
	}
	n := c.Connections
	r.perClient = c.Streams
	if c.Proto == H1 {
		n, r.perClient = c.Connections*c.Streams, 1
	}
	source := func(i int) netip.Addr {
		if len(c.Sources) == 0 {
			return netip.Addr{}
		}
		return c.Sources[i%len(c.Sources)]
	}
	switch c.Proto {
	case H3:
		if err := r.h3Clients(n, dst, tc, source); err != nil {
			return nil, err
		}
	default:
		for i := range n {
			r.clients = append(r.clients, newHTTPClient(c.Proto, tc, dst, source(i), c.Timeout))
		}
	}
	for i := range n {
		if src := source(i); src.IsValid() {
			r.srcNames = append(r.srcNames, src.String())
		} else {
			r.srcNames = append(r.srcNames, "")
		}
	}
	workers := n * r.perClient
	r.shards = make([]*shard, min(workers, 4*runtime.GOMAXPROCS(0)))
	for i := range r.shards {
		r.shards[i] = newShard()
	}
	return r, nil
}

// h3Clients makes n HTTP/3 clients: one quic.Transport per source address, shared by
// the connections from it, or one per connection (its own port) without Sources.
func (r *run) h3Clients(n int, dst netip.AddrPort, tc *tls.Config, source func(int) netip.Addr) error {
	tc = tc.Clone()
	tc.NextProtos = []string{http3.NextProtoH3}
	qconf := &quic.Config{MaxIncomingStreams: -1, KeepAlivePeriod: 10 * time.Second}
	h3 := &http3.Transport{DisableCompression: true}
	byAddr := make(map[netip.Addr]*quic.Transport)
	for i := range n {
		src := source(i)
		tr := byAddr[src]
		if tr == nil {
			var laddr *net.UDPAddr
			if src.IsValid() {
				laddr = &net.UDPAddr{IP: src.AsSlice()}
			}
			uc, err := net.ListenUDP("udp", laddr)
			if err != nil {
				return fmt.Errorf("bench: bind source %v: %w", src, err)
			}
			r.udp = append(r.udp, uc)
			tr = &quic.Transport{Conn: uc}
			r.quic = append(r.quic, tr)
			if src.IsValid() {
				byAddr[src] = tr
			}
		}
		r.clients = append(r.clients, &h3Client{
			tr: tr, addr: net.UDPAddrFromAddrPort(dst), tlsConf: tc, qconf: qconf, h3: h3,
		})
	}
	return nil
}

// resolve finds the target address once, preferring the sources' address family.
func resolve(ctx context.Context, u *url.URL, sources []netip.Addr) (netip.AddrPort, error) {
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	p, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bench: port %q: %w", port, err)
	}
	host := u.Hostname()
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return netip.AddrPort{}, fmt.Errorf("bench: resolve %q: %w", host, err)
	}
	for _, a := range addrs {
		a = a.Unmap()
		if len(sources) == 0 || a.Is4() == sources[0].Unmap().Is4() {
			return netip.AddrPortFrom(a, uint16(p)), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("bench: %q has no address in the sources' family", host)
}

func (r *run) close() {
	for _, c := range r.clients {
		c.close()
	}
	for _, tr := range r.quic {
		_ = tr.Close()
	}
	for _, uc := range r.udp {
		_ = uc.Close()
	}
}

func (r *run) run(ctx context.Context) (*Result, error) {
	c := &r.cfg
	r.start = time.Now()
	r.warmEnd = r.start.Add(c.Warmup)
	if c.Duration > 0 {
		r.end = r.warmEnd.Add(c.Duration)
	}
	if c.Rate > 0 {
		r.pacer = Pacer{Start: r.start, Rate: c.Rate}
		if c.Requests > 0 {
			r.stopAt = r.pacer.Before(c.Warmup) + c.Requests
		}
	}
	var wg sync.WaitGroup
	for w := range len(r.clients) * r.perClient {
		wg.Go(func() { r.work(ctx, w) })
	}
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	if c.Progress != nil {
		pwg.Go(func() { r.progress(stop) })
	}
	wg.Wait()
	close(stop)
	pwg.Wait()

	res := &Result{
		Proto:       c.Proto,
		URL:         c.URL,
		Connections: len(r.clients),
		Streams:     r.perClient,
		Rate:        c.Rate,
	}
	res.merge(r.shards, r.warmEnd)
	res.Unsent = r.unsentCount()
	res.Fields = r.fields.stats()
	if r.respect != nil {
		res.Respect = r.respect.stats()
	}
	if ctx.Err() != nil {
		return res, context.Cause(ctx)
	}
	return res, nil
}

// unsentCount returns the measured open-loop requests that were scheduled before the end
// but never sent; call after all workers stopped.
func (r *run) unsentCount() int64 {
	if r.cfg.Rate <= 0 || r.end.IsZero() {
		return r.unsent.Load()
	}
	scheduled := r.pacer.Before(r.end.Sub(r.start))
	if r.stopAt > 0 {
		scheduled = min(scheduled, r.stopAt)
	}
	// Indices below next were claimed (and sent, or counted in unsent); the rest of
	// the measured schedule was never claimed.
	first := max(r.next.Load(), r.pacer.Before(r.warmEnd.Sub(r.start)))
	return r.unsent.Load() + max(scheduled-first, 0)
}

// work is worker w's loop: claim a send time, send, record, until the run ends.
func (r *run) work(ctx context.Context, w int) {
	cl := r.clients[w/r.perClient]
	src := r.srcNames[w/r.perClient]
	sh := r.shards[w%len(r.shards)]
	keys := newKeyPicker(r.cfg.Keys, r.cfg.Zipf, uint64(r.start.UnixNano())+uint64(w), r.keyNames)
	for {
		at, measured, ok := r.claim(ctx)
		if !ok {
			return
		}
		if pause := r.send(ctx, cl, src, sh, keys, at, measured); pause > 0 && !sleep(ctx, pause) {
			return
		}
	}
}

// claim returns when to send the next request (now in closed loop; the intended time,
// after waiting for it, in open loop) and whether it is measured; ok is false once the
// run is over.
func (r *run) claim(ctx context.Context) (at time.Time, measured, ok bool) {
	if ctx.Err() != nil {
		return time.Time{}, false, false
	}
	if r.cfg.Rate > 0 {
		i := r.next.Add(1) - 1
		if r.stopAt > 0 && i >= r.stopAt {
			return time.Time{}, false, false
		}
		at = r.pacer.At(i)
		if !r.end.IsZero() && !at.Before(r.end) {
			return time.Time{}, false, false
		}
		if !r.end.IsZero() && !time.Now().Before(r.end) {
			// Behind schedule at the end (a stalled server, a slow generator): the run
			// is over, and the backlog is counted as unsent, not sent late for ever.
			if !at.Before(r.warmEnd) {
				r.unsent.Add(1)
			}
			return time.Time{}, false, false
		}
		if d := time.Until(at); d > 0 && !sleep(ctx, d) {
			return time.Time{}, false, false
		}
		return at, !at.Before(r.warmEnd), true
	}
	now := time.Now()
	if !r.end.IsZero() && !now.Before(r.end) {
		return time.Time{}, false, false
	}
	if now.Before(r.warmEnd) {
		return now, false, true
	}
	if r.cfg.Requests > 0 && r.next.Add(1) > r.cfg.Requests {
		return time.Time{}, false, false
	}
	return now, true, true
}

// send makes one request intended to leave at at, from source src, and records it if
// measured. It returns the pause the response hook asked for.
func (r *run) send(ctx context.Context, cl client, src string, sh *shard, keys *keyPicker, at time.Time, measured bool) time.Duration {
	var apiKey string
	if keys != nil {
		apiKey = keys.next()
	}
	clientKey := src + "|" + apiKey
	if r.respect != nil {
		if !r.respect.acquire(ctx, clientKey, r.end) {
			if measured && r.cfg.Rate > 0 && ctx.Err() == nil {
				r.unsent.Add(1) // the run ended while the fields held it back
			}
			return 0
		}
		if r.cfg.Rate == 0 {
			at = time.Now()
		}
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	resp, err := cl.roundTrip(r.request(rctx, apiKey))
	var pause time.Duration
	var n int64
	if err == nil {
		recv := time.Now()
		r.fields.observe(resp, clientKey, sent, recv, measured)
		if r.respect != nil {
			r.respect.release(clientKey, resp, recv)
		}
		if r.cfg.OnResponse != nil {
			pause = r.cfg.OnResponse(resp)
		}
		n, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	} else if r.respect != nil {
		r.respect.release(clientKey, nil, time.Now())
	}
	now := time.Now()
	if ctx.Err() != nil {
		return 0 // the run was interrupted: this request says nothing about the server
	}
	r.done.Add(1)
	if err != nil {
		r.failed.Add(1)
		kind := Classify(err)
		if errors.Is(rctx.Err(), context.DeadlineExceeded) {
			// Transports report their own cancellation in many ways (stream reset,
			// closed body); the deadline is what happened.
			kind = ErrTimeout
		}
		if measured {
			sh.failure(kind, now)
			if r.cfg.OnMeasured != nil {
				r.cfg.OnMeasured(at, now.Sub(at), 0)
			}
		}
		return pause
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		r.got429.Add(1)
	}
	if measured {
		sh.response(resp.StatusCode, now.Sub(at), n, now)
		if r.cfg.OnMeasured != nil {
			r.cfg.OnMeasured(at, now.Sub(at), resp.StatusCode)
		}
	}
	return pause
}

func (r *run) request(ctx context.Context, apiKey string) *http.Request {
	h := r.header // shared read-only: transports do not modify request headers
	if apiKey != "" {
		h = make(http.Header, len(r.header)+1)
		for k, v := range r.header {
			h[k] = v
		}
		h[textproto.CanonicalMIMEHeaderKey(r.cfg.KeyHeader)] = []string{apiKey}
	}
	req := (&http.Request{
		Method:     r.cfg.Method,
		URL:        r.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Host:       r.host,
	}).WithContext(ctx)
	if r.body != nil {
		req.ContentLength = int64(len(r.body))
		req.Body = io.NopCloser(bytes.NewReader(r.body))
		req.GetBody = func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(r.body)), nil
		}
	}
	return req
}

// progress writes the live line once a second until stop is closed.
func (r *run) progress(stop <-chan struct{}) {
	w := r.cfg.Progress
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-stop:
			fmt.Fprint(w, "\n")
			return
		case now := <-t.C:
			done := r.done.Load()
			phase := ""
			if now.Before(r.warmEnd) {
				phase = " (warm-up)"
			}
			fmt.Fprintf(w, "\r%5.0fs%s  %d requests  %d req/s  %d errors  %d × 429   ",
				now.Sub(r.start).Seconds(), phase, done, done-last, r.failed.Load(), r.got429.Load())
			last = done
		}
	}
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
