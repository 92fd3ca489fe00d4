package scenario

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/netip"
	"time"

	"github.com/h3edge/h3edge/bench/scenario/flood"
)

const claimDropCost = "a banned source's datagram costs the server at least 50× less CPU than a full policy 429 (short mode: 20×); the order of the other layers is reported, not claimed"

// Thresholds of the drop-cost claim. Short mode floods each layer for well under a
// second, so a layer's CPU is a few dozen 10 ms ticks: two neighbouring layers within
// 25 % of each other cannot be told apart, and the datagram's share is a handful of
// ticks.
const (
	dropCostFactor      = 50.0
	dropCostShortFactor = 20.0
	dropCostShortSlack  = 1.25
)

// The drop-cost scenario runs in four steps: the schedule (dropCostSchedule: the
// layers below and the rounds), measureDropCost (dropcost_measure.go),
// analyseDropCost (dropcost_analysis.go) and dropCostReport with its chart
// (dropcost_report.go).

// A dropLayer is one way h3edge refuses a unit, measured on an h3edge process of its own
// whose configuration makes that layer refuse everything the flooder sends.
type dropLayer struct {
	Key   string `json:"key"`
	Name  string `json:"name"`
	Unit  string `json:"unit"`
	Proto string `json:"proto"`
	// Series are the h3edge metrics whose increase counts the units.
	Series []string `json:"series"`
	// Ref is the key of the full 429 this layer is compared with (same transport).
	Ref string `json:"ref,omitempty"`
	// Aside marks a row outside the claim, shown to explain it: the refusal step of
	// the QUIC connection layer alone, a served request.
	Aside bool `json:"aside,omitempty"`

	label  string // in the chart: ", " breaks the line
	config string
	srcs   []netip.Addr
	ban    bool // ban srcs through the admin API before flooding
	// build makes the layer's flooder for s, whose certificate tc pins.
	build func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error)
	full  bool // full mode only
}

// dropRound is one measured flood of one layer.
type dropRound struct {
	Units float64 `json:"units"`
	CPUms float64 `json:"server_cpu_ms"`
	// Below is set when the server used less CPU than one clock tick (10 ms) in the
	// round: CPUms and PerUnitUs are then upper bounds, one tick's worth.
	Below     bool        `json:"below_one_tick,omitempty"`
	Seconds   float64     `json:"seconds"`
	PerUnitUs float64     `json:"cpu_per_unit_us"`
	Client    flood.Stats `json:"client"`
}

// dropResult is a layer's measurements.
type dropResult struct {
	dropLayer
	Rounds []dropRound `json:"rounds"`
	// PerUnitUs is the median over rounds of server CPU ÷ units; Low and High the spread.
	PerUnitUs    float64 `json:"cpu_per_unit_us"`
	LowUs        float64 `json:"cpu_per_unit_us_min"`
	HighUs       float64 `json:"cpu_per_unit_us_max"`
	UnitsPerSec  float64 `json:"units_per_second"`
	ServerBusy   float64 `json:"server_cpu_busy"`
	RefPerUnitUs float64 `json:"ref_cpu_per_unit_us,omitempty"`
	// Cheaper is how many of this layer's units cost the server as much as one unit of
	// Ref: Ref's CPU per unit ÷ this layer's.
	Cheaper float64 `json:"times_cheaper_than_ref,omitempty"`
	// Stray lists other refusal counters that moved during the layer's rounds.
	Stray map[string]float64 `json:"stray,omitempty"`
}

// Loopback sources of the flooders, one range per layer.
var (
	dropSrcDatagram = netip.MustParseAddr("127.0.0.151")
	dropSrcQUIC     = []netip.Addr{netip.MustParseAddr("127.0.0.152"), netip.MustParseAddr("127.0.0.153")}
	dropSrcTCP      = []netip.Addr{netip.MustParseAddr("127.0.0.154"), netip.MustParseAddr("127.0.0.155")}
	dropSrcStream   = netip.MustParseAddr("127.0.0.156")
	dropSrcPrebuilt = netip.MustParseAddr("127.0.0.157")
	dropSrcFull3    = netip.MustParseAddr("127.0.0.158")
	dropSrcFull2    = netip.MustParseAddr("127.0.0.159")
	dropSrcServed   = netip.MustParseAddr("127.0.0.160")
	dropSrcReplay   = netip.MustParseAddr("127.0.0.161")
)

// dropStreams is how many requests a request flooder keeps in flight on its one
// connection, and dropWorkers how many handshakes or TCP connects are in flight.
const (
	dropStreams = 32
	dropWorkers = 32
	// dropTCPWait is how long the TCP flood waits on a connection the tarpit holds.
	dropTCPWait = 5 * time.Millisecond
)

// Configurations: every layer turns the penalty box's automatic bans off (its refusals
// would otherwise ban the flooder and move the refusal to the socket); the layer under
// test is set to refuse everything after the first unit.
const (
	dropBoxOff    = abuseOff
	dropNoRetry   = "  retry_above: 10000000\n" // no surge Retry: only the budget decides
	dropFullQuota = `policies:
  - {name: per-key, key: [header:X-API-Key, ip], algorithm: fixed_window, quota: 1, window: 3600s}
`
)

func dropLayers() []*dropLayer {
	streamsTiny := "ip:\n  connections: {rate: 100000, burst: 100000}\n  streams: {rate: 0.001, burst: 1}\n  max_connections: 100000\n"
	h := func(k, v string) http.Header { return http.Header{k: {v}} }
	return []*dropLayer{
		{
			Key: "datagram", label: "banned, datagram", Name: "dropped datagram", Unit: "UDP datagram (a replayed QUIC Initial) from a banned source", Proto: "udp",
			Series: []string{`h3edge_dropped_datagrams_total{reason="banned"}`, `h3edge_dropped_datagrams_total{reason="kernel"}`}, Ref: "full-h3",
			config: dropBoxOff, srcs: []netip.Addr{dropSrcDatagram}, ban: true,
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				initial, err := flood.CaptureInitial(ctx, tc)
				if err != nil {
					return nil, err
				}
				return flood.NewDatagram(l.srcs, s.addr, initial)
			},
		},
		{
			Key: "quic", label: "QUIC, handshake", Name: "refused QUIC connection", Unit: "QUIC handshake over the source's connection budget: Retry, then CONNECTION_REFUSED", Proto: "h3",
			Series: []string{`h3edge_refused_connections_total{proto="h3",reason="rate"}`}, Ref: "full-h3",
			config: "ip:\n  connections: {rate: 0.001, burst: 1}\n" + dropNoRetry + dropBoxOff, srcs: dropSrcQUIC,
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				return flood.NewQUICConn(l.srcs, s.addr, tc, dropWorkers)
			},
		},
		{
			Key: "quic-replay", label: "replayed, Initial *", Name: "refused QUIC Initial, replayed", Unit: "a client's token-carrying Initial (after a Retry) replayed from its source: CONNECTION_REFUSED at the budget, no Retry", Proto: "h3",
			Series: []string{`h3edge_refused_connections_total{proto="h3",reason="rate"}`}, Ref: "full-h3", Aside: true,
			config: "ip:\n  connections: {rate: 0.001, burst: 1}\n" + dropNoRetry + dropBoxOff, srcs: []netip.Addr{dropSrcReplay},
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				// Spend the source's burst of one connection, so that the next dial is
				// asked for a Retry and then refused.
				spend, err := flood.NewQUICConn(l.srcs, s.addr, tc, 1)
				if err != nil {
					return nil, err
				}
				spend.Flood(ctx, 20*time.Millisecond)
				spend.Close()
				f, err := flood.NewDatagram(l.srcs, s.addr, nil)
				if err != nil {
					return nil, err
				}
				// A Retry token lives 10 s: capture a fresh one before every flood.
				f.Refresh = func(ctx context.Context) ([]byte, error) {
					return flood.CaptureTokenInitial(ctx, l.srcs[0], s.addr, tc)
				}
				return f, nil
			},
		},
		{
			Key: "tcp", label: "TCP, accept", Name: "refused TCP accept", Unit: "TCP connection from a banned source, refused at accept before TLS: held unanswered (the tarpit), then reset", Proto: "tcp",
			Series: []string{`h3edge_refused_connections_total{proto="tcp",reason="banned"}`}, Ref: "full-h2",
			config: dropBoxOff, srcs: dropSrcTCP, ban: true,
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				// A banned source's connection is held (the tarpit): each worker
				// gives it dropTCPWait before it closes it and dials again.
				return &flood.TCP{Srcs: l.srcs, Dst: s.addr, Workers: dropWorkers, Wait: dropTCPWait}, nil
			},
		},
		{
			Key: "stream", label: "h3, stream", Name: "refused h3 stream", Unit: "HTTP/3 request over the source's stream budget, reset with H3_REQUEST_REJECTED", Proto: "h3",
			Series: []string{`h3edge_refused_streams_total{proto="h3",reason="rate"}`}, Ref: "full-h3",
			config: streamsTiny + dropBoxOff, srcs: []netip.Addr{dropSrcStream},
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				return flood.NewH3(ctx, l.srcs[0], s.addr, s.url("/"), nil, tc, dropStreams)
			},
		},
		{
			Key: "prebuilt", label: "prebuilt, 429 (h2)", Name: "prebuilt 429", Unit: "HTTP/2 request over the source's stream budget, answered with the prebuilt 429", Proto: "h2",
			Series: []string{`h3edge_refused_streams_total{proto="h2",reason="rate"}`}, Ref: "full-h2",
			config: streamsTiny + dropBoxOff, srcs: []netip.Addr{dropSrcPrebuilt},
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				return flood.NewH2(l.srcs[0], s.addr, s.url("/"), nil, tc, dropStreams)
			},
		},
		{
			Key: "full-h3", label: "full 429, (h3)", Name: "full 429 (h3)", Unit: "HTTP/3 request denied by a per-key policy: RateLimit fields, Retry-After, problem document", Proto: "h3",
			Series: []string{`h3edge_requests_total{code="429",proto="h3"}`},
			config: ipLimitsRaised + dropBoxOff + dropFullQuota, srcs: []netip.Addr{dropSrcFull3},
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				return flood.NewH3(ctx, l.srcs[0], s.addr, s.url("/api/x"), h("X-Api-Key", "k-drop-cost"), tc, dropStreams)
			},
		},
		{
			Key: "full-h2", label: "full 429, (h2)", Name: "full 429 (h2)", Unit: "HTTP/2 request denied by a per-key policy: RateLimit fields, Retry-After, problem document", Proto: "h2",
			Series: []string{`h3edge_requests_total{code="429",proto="h2"}`},
			config: ipLimitsRaised + dropBoxOff + dropFullQuota, srcs: []netip.Addr{dropSrcFull2},
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				return flood.NewH2(l.srcs[0], s.addr, s.url("/api/x"), h("X-Api-Key", "k-drop-cost"), tc, dropStreams)
			},
		},
		{
			Key: "served-h3", label: "served 200, (h3) *", Name: "served 200 (h3)", Unit: "HTTP/3 request served by the demo origin (no policy): for scale, not a refusal", Proto: "h3",
			Series: []string{`h3edge_requests_total{code="200",proto="h3"}`}, Ref: "full-h3", Aside: true, full: true,
			config: ipLimitsRaised + dropBoxOff, srcs: []netip.Addr{dropSrcServed},
			build: func(ctx context.Context, s *server, tc *tls.Config, l *dropLayer) (flood.Flooder, error) {
				return flood.NewH3(ctx, l.srcs[0], s.addr, s.url("/"), nil, tc, dropStreams)
			},
		},
	}
}

// dropSchedule is what a run measures: which layers, how many rounds of how long, and
// the claim's thresholds for the mode.
type dropSchedule struct {
	rounds    int
	warm, dur time.Duration
	// factor is how many times cheaper than a full 429 the datagram must be; slack how
	// much dearer than the next layer a layer may be and still count as cheaper.
	factor, slack float64
	layers        []*dropLayer
}

// dropCostSchedule returns the full or the short schedule.
func dropCostSchedule(short bool) dropSchedule {
	s := dropSchedule{rounds: 3, warm: 300 * time.Millisecond, dur: 1500 * time.Millisecond, factor: dropCostFactor, slack: 1}
	if short {
		s.rounds, s.warm, s.dur = 1, 100*time.Millisecond, 700*time.Millisecond
		s.factor, s.slack = dropCostShortFactor, dropCostShortSlack
	}
	for _, l := range dropLayers() {
		if !l.full || !short {
			s.layers = append(s.layers, l)
		}
	}
	return s
}

// dropCostFigures is the scenario's JSON figures.
type dropCostFigures struct {
	Factor float64       `json:"factor"`
	Slack  float64       `json:"slack"`
	Rounds int           `json:"rounds"`
	Flood  float64       `json:"flood_seconds"`
	Layers []*dropResult `json:"layers"`
}

// runDropCost is the scenario: its schedule, then the steps.
func runDropCost(ctx context.Context, e *env) (*Report, error) {
	sched := dropCostSchedule(e.opt.Short)
	results, err := measureDropCost(ctx, e, sched)
	if err != nil {
		return nil, err
	}
	a, err := analyseDropCost(sched, results)
	if err != nil {
		return nil, err
	}
	return dropCostReport(sched, a, e.opt.Short), nil
}
