// Package attack holds h3bench's protocol-abuse clients: HTTP/2 Rapid Reset,
// MadeYouReset, CONTINUATION and HPACK floods, SETTINGS/PING/empty-frame floods,
// slowloris, slow POST, slow read, stalled QUIC streams, QUIC Initials from spoofed
// sources and held requests that push the server into overload. Each is written on
// golang.org/x/net/http2's Framer or on quic-go, sends only to the target it is given
// (loopback in h3bench), and stops by itself: after Target.Duration, or when its
// context ends. The scenario runner (bench/scenario's RunAttack) starts h3edge, runs
// one attack beside legitimate clients and judges the outcome.
package attack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Target is what an attack is aimed at and how hard.
type Target struct {
	// Addr is the server's address: TCP for HTTP/1.1 and HTTP/2, UDP for HTTP/3.
	Addr netip.AddrPort
	// Sources are the local addresses the attack sends from, one worker set each.
	Sources []netip.Addr
	// Conns is the number of connections each source keeps open at a time. If zero,
	// the attack's own default is used.
	Conns int
	// TLS is the client TLS configuration (certificate checks); NextProtos is set by
	// the attack.
	TLS *tls.Config
	// Duration bounds the attack; it stops by itself then. Required.
	Duration time.Duration
	// Interval paces the slow attacks: one byte (slowloris, slow POST) or one KiB
	// (slow read) per Interval. If zero, one second.
	Interval time.Duration
	// Count and Rate size quic-initial-flood: Count Initials, each from its own
	// address counted up from Sources[0], Rate per second. Other attacks ignore them.
	Count int
	Rate  float64
	// SampleEvery, if positive, makes the Outcome a time series as well: what Sent
	// counted in each SampleEvery from the attack's start, and the connections open at
	// its end (Outcome.SentPerSample, OpenPerSample). Zero: totals only.
	SampleEvery time.Duration
}

// ErrUnknown is returned (wrapped) for a name no attack has.
var ErrUnknown = errors.New("attack: unknown attack")

// Attack is one kind of abuse.
type Attack struct {
	// Name is the command-line name (h3bench attack NAME).
	Name string
	// Summary says what the attacker sends, in a line.
	Summary string
	// Proto is "h2", "h1" or "h3": the protocol the legitimate clients should use to
	// share the attacked path.
	Proto string
	// Conns is the connections per source when Target.Conns is zero.
	Conns int
	// Unit is what Outcome.Sent counts, plural: "frames", "streams", "bytes"…
	Unit string
	// conn runs one connection of the attack until it ends; it reports what happened
	// to rec.
	conn func(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error
	// flood, instead of conn, runs the whole attack once: for an attack whose sources
	// are too many for a worker each (quic-initial-flood).
	flood func(ctx context.Context, t *Target, rec *recorder) error
}

// attacks is the registry, in the README's order.
var attacks = []*Attack{
	{Name: "rapid-reset", Unit: "streams", Proto: "h2", Conns: 2, conn: rapidReset,
		Summary: "HTTP/2 HEADERS + RST_STREAM(CANCEL) loops (CVE-2023-44487)"},
	{Name: "made-you-reset", Unit: "streams", Proto: "h2", Conns: 2, conn: madeYouReset,
		Summary: "HTTP/2 requests followed by WINDOW_UPDATE 0, DATA after END_STREAM or a self-dependent PRIORITY, which make the server reset the stream (CVE-2025-8671)"},
	{Name: "continuation", Unit: "frames", Proto: "h2", Conns: 2, conn: continuationFlood,
		Summary: "HTTP/2 HEADERS without END_HEADERS, then zero-length CONTINUATION frames without end (CVE-2024-27316 family)"},
	{Name: "hpack-bomb", Unit: "header blocks", Proto: "h2", Conns: 2, conn: hpackBomb,
		Summary: "HTTP/2 header blocks of one-byte references to a 4 KB dynamic-table entry, each decoding past the header limit"},
	{Name: "settings-flood", Unit: "frames", Proto: "h2", Conns: 2, conn: settingsFlood,
		Summary: "HTTP/2 SETTINGS frames without end (CVE-2019-9515)"},
	{Name: "ping-flood", Unit: "frames", Proto: "h2", Conns: 2, conn: pingFlood,
		Summary: "HTTP/2 PING frames without end (CVE-2019-9512)"},
	{Name: "empty-frames", Unit: "frames", Proto: "h2", Conns: 2, conn: emptyFrames,
		Summary: "HTTP/2 empty DATA frames without END_STREAM on an open request (CVE-2019-9518)"},
	{Name: "slowloris", Unit: "bytes", Proto: "h1", Conns: 20, conn: slowloris,
		Summary: "HTTP/1.1 header lines trickled one byte per interval"},
	{Name: "slow-post", Unit: "bytes", Proto: "h1", Conns: 20, conn: slowPost,
		Summary: "HTTP/1.1 POST announcing 10 MB, its body sent one byte per interval"},
	{Name: "slow-read", Unit: "bytes read", Proto: "h1", Conns: 10, conn: slowRead,
		Summary: "HTTP/1.1 GET of 64 MB read one KiB per interval through a small receive buffer"},
	{Name: "quic-stall", Unit: "streams", Proto: "h3", Conns: 8, conn: quicStall,
		Summary: "QUIC connections opening every request stream they may and never sending HEADERS"},
	{Name: "quic-initial-flood", Unit: "Initials", Proto: "h3", flood: initialFlood,
		Summary: "QUIC Initials with a real ClientHello, each from its own spoofed 127.x.y.z address, never answered"},
	{Name: "overload", Unit: "requests", Proto: "h2", Conns: 2, conn: overloadConn,
		Summary: "HTTP/2 connections each holding 100 requests that keep a handler busy 5 s, replaced as they end"},
}

// Names lists the attacks.
func Names() []string {
	names := make([]string, len(attacks))
	for i, a := range attacks {
		names[i] = a.Name
	}
	return names
}

// Lookup returns the named attack, or an error wrapping ErrUnknown.
func Lookup(name string) (*Attack, error) {
	i := slices.IndexFunc(attacks, func(a *Attack) bool { return a.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w %q (have %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return attacks[i], nil
}

// Run runs the attack against t until t.Duration has passed or ctx ends: each source
// keeps its connections open, and opens a new one when the server closes one, until
// the end. It returns what the attacker got.
func (a *Attack) Run(ctx context.Context, t Target) (*Outcome, error) {
	if t.Duration <= 0 || len(t.Sources) == 0 || !t.Addr.IsValid() {
		return nil, errors.New("attack: target needs an address, sources and a duration")
	}
	if t.Interval <= 0 {
		t.Interval = time.Second
	}
	conns := t.Conns
	if conns <= 0 {
		conns = a.Conns
	}
	ctx, cancel := context.WithTimeout(ctx, t.Duration)
	defer cancel()
	rec := newRecorder()
	stop := make(chan struct{})
	var series sync.WaitGroup
	if t.SampleEvery > 0 {
		series.Go(func() { rec.sample(t.SampleEvery, stop) })
	}
	var err error
	if a.flood != nil {
		err = a.flood(ctx, &t, rec)
	} else {
		var wg sync.WaitGroup
		for _, src := range t.Sources {
			for range conns {
				wg.Go(func() { a.worker(ctx, &t, src, rec) })
			}
		}
		wg.Wait()
	}
	close(stop)
	series.Wait()
	out := rec.outcome()
	out.SampleEvery = t.SampleEvery
	return out, err
}

// worker runs connections of the attack one after another until ctx ends. A refused
// connection is retried after redialPause: an attacker reconnects, but a loop
// without pause would measure only how fast loopback refuses.
func (a *Attack) worker(ctx context.Context, t *Target, src netip.Addr, rec *recorder) {
	pause := time.NewTimer(0)
	defer pause.Stop()
	for ctx.Err() == nil {
		if err := a.conn(ctx, t, src, rec); err != nil && ctx.Err() == nil {
			rec.refused.Add(1)
			rec.lastError.Store(err.Error())
		}
		pause.Reset(redialPause)
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
	}
}

// endSlack is how close to the attack's end a connection's failure counts as the
// attack stopping.
const endSlack = 100 * time.Millisecond

// redialPause is how long a worker waits before it reconnects.
const redialPause = 50 * time.Millisecond

// Outcome is what an attack got from the server.
type Outcome struct {
	// Conns counts connections whose handshake completed; Refused the dials that did
	// not (reset at accept, handshake refused or timed out). quic-initial-flood: the
	// spoofed sources answered with a ServerHello (a handshake begun) and with a
	// CONNECTION_CLOSE.
	Conns   int64 `json:"conns"`
	Refused int64 `json:"refused"`
	// Retries counts the Retry packets received (quic-initial-flood).
	Retries int64 `json:"retries,omitempty"`
	// Sent counts what the attack sent, in its Attack.Unit: frames or streams (HTTP/2
	// floods), streams (quic-stall), Initials (quic-initial-flood), requests (overload)
	// or bytes (slow attacks).
	Sent int64 `json:"sent"`
	// Responses counts responses the attacker received, by status.
	Responses int64         `json:"responses"`
	Status    map[int]int64 `json:"status,omitempty"`
	// GoAway counts the GOAWAY frames received by error code.
	GoAway map[string]int64 `json:"goaway,omitempty"`
	// Closed counts connections the server ended (a read or write failed before the
	// attack's end); Held those still open at the end.
	Closed int64 `json:"closed"`
	Held   int64 `json:"held"`
	// CloseP50 and CloseMax are how long the server let a connection abuse it: from
	// the first abusive byte to the server's close (or the answer that ended it).
	CloseP50 time.Duration `json:"close_p50_ns"`
	CloseMax time.Duration `json:"close_max_ns"`
	// PeakOpen is the most connections (quic-stall: streams) open at once.
	PeakOpen int64 `json:"peak_open"`
	// LastError is the last dial error, for the report.
	LastError string `json:"last_error,omitempty"`
	// Start is when the attack began, on the wall clock: a runner in another process
	// places the samples on its own time line with it.
	Start time.Time `json:"start"`
	// With Target.SampleEvery: SentPerSample[i] is what Sent counted in the i-th
	// SampleEvery from Start (the last one also what was sent while the connections
	// wound down), OpenPerSample[i] the connections (quic-stall: streams) open at its
	// end.
	SampleEvery   time.Duration `json:"sample_every_ns,omitempty"`
	SentPerSample []int64       `json:"sent_per_sample,omitempty"`
	OpenPerSample []int64       `json:"open_per_sample,omitempty"`
}

// recorder collects an attack's events from its workers. Safe for concurrent use.
type recorder struct {
	conns, refused, sent, closed, held, retries atomic.Int64
	open, peak                                  atomic.Int64
	lastError                                   atomic.Value // string
	start                                       time.Time

	mu     sync.Mutex
	status map[int]int64
	goaway map[string]int64
	lives  []time.Duration
	// sent and open per sample, appended by sample alone
	sentSamples, openSamples []int64
}

func newRecorder() *recorder {
	return &recorder{status: map[int]int64{}, goaway: map[string]int64{}, start: time.Now()}
}

// sample takes what sent counted and what is open every d from the recorder's start,
// and once more when stop is closed.
func (r *recorder) sample(d time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	var last int64
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		case <-tick.C:
		}
		n := r.sent.Load()
		r.mu.Lock()
		r.sentSamples = append(r.sentSamples, n-last)
		r.openSamples = append(r.openSamples, r.open.Load())
		r.mu.Unlock()
		last = n
	}
}

// opened counts a connection (or stream) in; the returned function counts it out.
func (r *recorder) opened() (closed func()) {
	r.conns.Add(1)
	n := r.open.Add(1)
	for {
		p := r.peak.Load()
		if n <= p || r.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return func() { r.open.Add(-1) }
}

// ended records how a connection ended: closed by the server after life of abuse,
// or still held when the attack stopped. A connection's deadline is the attack's end
// (dialTLS), so a failure in the last moments is the attack stopping, not the server.
func (r *recorder) ended(ctx context.Context, life time.Duration) {
	if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(dl) < endSlack {
		r.held.Add(1)
		return
	}
	r.closed.Add(1)
	r.mu.Lock()
	r.lives = append(r.lives, life)
	r.mu.Unlock()
}

func (r *recorder) response(status int) {
	r.mu.Lock()
	r.status[status]++
	r.mu.Unlock()
}

func (r *recorder) goAway(code string) {
	r.mu.Lock()
	r.goaway[code]++
	r.mu.Unlock()
}

func (r *recorder) outcome() *Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := &Outcome{
		Conns: r.conns.Load(), Refused: r.refused.Load(), Sent: r.sent.Load(), Retries: r.retries.Load(),
		Closed: r.closed.Load(), Held: r.held.Load(), PeakOpen: r.peak.Load(),
		Status: r.status, GoAway: r.goaway,
		Start: r.start, SentPerSample: r.sentSamples, OpenPerSample: r.openSamples,
	}
	for _, n := range r.status {
		o.Responses += n
	}
	if s, ok := r.lastError.Load().(string); ok {
		o.LastError = s
	}
	if len(r.lives) > 0 {
		slices.Sort(r.lives)
		o.CloseP50, o.CloseMax = r.lives[len(r.lives)/2], r.lives[len(r.lives)-1]
	}
	return o
}
