package scenario

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/h3edge/h3edge/bench"
)

const claimProxy = "a request h3edge proxies to a Go HTTP/1.1 origin on loopback (one never-firing per-IP policy, keep-alive) costs h3edge at most 2× the CPU of the same request answered by its demo origin on HTTP/3 and HTTP/2 (issue 12), at most 2.0× nginx's CPU on HTTP/1.1 and 3.0× on HTTP/2, and at most 30 µs on HTTP/3 (issue 16); median of interleaved rounds (short mode: one round, 4× the demo origin's)"

// Bounds of the proxy claim; short mode checks only the loose one.
const (
	proxyDemoBound    = 2.0
	proxyNginxH1Bound = 2.0
	proxyNginxH2Bound = 3.0
	proxyH3BoundUs    = 30.0
	proxyShortBound   = 4.0
)

// The servers of the proxy scenario, in the order of a round; nginx and HAProxy when
// installed, and only on HTTP/2 and HTTP/1.1.
const (
	proxyEdge = "h3edge proxied"
	proxyDemo = "h3edge demo"
	proxyNgx  = "nginx"
	proxyHAP  = "haproxy"
)

// proxyPolicy is the never-firing per-IP policy both h3edge instances enforce.
const proxyPolicy = `policies:
  - {name: per-ip, key: [ip], algorithm: fixed_window, quota: 1000000000, window: 1s}
`

var originReady = regexp.MustCompile(`^origin serving\b`)

// proxySchedule is how many rounds, how long each run.
type proxySchedule struct {
	short     bool
	rounds    int
	warm, dur time.Duration
}

func newProxySchedule(short bool) proxySchedule {
	if short {
		return proxySchedule{short: true, rounds: 1, warm: 150 * time.Millisecond, dur: 500 * time.Millisecond}
	}
	return proxySchedule{rounds: 5, warm: 200 * time.Millisecond, dur: 800 * time.Millisecond}
}

// proxyRun is one measured run of one server on one protocol.
type proxyRun struct {
	Server            string      `json:"server"`
	Proto             bench.Proto `json:"proto"`
	Round             int         `json:"round"`
	RequestsPerSecond float64     `json:"requests_per_second"`
	Errors            int64       `json:"errors"`
	Non200            int64       `json:"non_200"`
	// CPUPerRequestUs is the server process's utime+stime over the run ÷ its requests.
	CPUPerRequestUs float64 `json:"cpu_per_request_us"`
	// OriginCPUPerRequestUs is the origin's, over the same run: near zero for the demo
	// origin, which answers itself.
	OriginCPUPerRequestUs float64 `json:"origin_cpu_per_request_us"`
}

// proxyCell is one server on one protocol over the rounds.
type proxyCell struct {
	Server    string      `json:"server"`
	Proto     bench.Proto `json:"proto"`
	CPUus     []float64   `json:"cpu_per_request_us"`
	CPUMedian float64     `json:"cpu_per_request_us_median"`
	RPSMedian float64     `json:"requests_per_second_median"`
}

// proxyFigures is the scenario's JSON.
type proxyFigures struct {
	Cells  []proxyCell            `json:"cells"`
	Ratios map[string]float64     `json:"ratios"` // "h2 proxied/nginx" …
	Checks []proxyCheck           `json:"checks"`
	Runs   []proxyRun             `json:"runs"`
	Loads  map[bench.Proto]string `json:"loads"`
}

// proxyCheck is one bound of the claim.
type proxyCheck struct {
	What  string  `json:"what"`
	Value float64 `json:"value"`
	Bound float64 `json:"bound"`
	Holds bool    `json:"holds"`
}

func runProxy(ctx context.Context, e *env) (*Report, error) {
	sched := newProxySchedule(e.opt.Short)
	originProc, origin, err := e.startOrigin(ctx)
	if err != nil {
		return nil, err
	}
	edge, err := e.startH3edge(ctx, "proxied", ipLimitsRaised+abuseOff+proxyPolicy+fmt.Sprintf("upstream: http://%v\n", origin))
	if err != nil {
		return nil, err
	}
	demo, err := e.startH3edge(ctx, "demo", ipLimitsRaised+abuseOff+proxyPolicy)
	if err != nil {
		return nil, err
	}
	servers := map[string]*server{proxyEdge: edge, proxyDemo: demo}
	order := []string{proxyEdge, proxyDemo}
	var notes []string
	pin, err := e.referenceTLS()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{proxyNgx, proxyHAP} {
		s, ok, err := e.startReference(ctx, name, origin, pin)
		if err != nil {
			return nil, err
		}
		if !ok {
			notes = append(notes, name+" is not installed: no reference figures for it")
			continue
		}
		servers[name] = s
		order = append(order, name)
	}
	m := proxyMeasured{cells: map[string]*proxyCell{}}
	for round := range sched.rounds {
		for _, load := range baselineLoads {
			// Rotate the order per round, so that no server always runs first.
			for i := range order {
				name := order[(i+round)%len(order)]
				if load.proto == bench.H3 && (name == proxyNgx || name == proxyHAP) {
					continue
				}
				run, err := measureProxyRun(ctx, sched, load, servers[name], originProc, name, round)
				if err != nil {
					return nil, err
				}
				e.logf("%s %s round %d: %.0f req/s, %.1f µs CPU/request", name, load.proto, round+1, run.RequestsPerSecond, run.CPUPerRequestUs)
				m.add(run)
			}
		}
	}
	return proxyReport(sched, &m, order, notes), nil
}

// proxyMeasured is every run, and the cells they add up to.
type proxyMeasured struct {
	runs  []proxyRun
	cells map[string]*proxyCell
	rps   map[string][]float64
}

func (m *proxyMeasured) add(r proxyRun) {
	m.runs = append(m.runs, r)
	k := r.Server + "|" + string(r.Proto)
	c := m.cells[k]
	if c == nil {
		c = &proxyCell{Server: r.Server, Proto: r.Proto}
		m.cells[k] = c
	}
	c.CPUus = append(c.CPUus, r.CPUPerRequestUs)
	if m.rps == nil {
		m.rps = map[string][]float64{}
	}
	m.rps[k] = append(m.rps[k], r.RequestsPerSecond)
	c.CPUMedian, c.RPSMedian = median(c.CPUus), median(m.rps[k])
}

func (m *proxyMeasured) cell(server string, p bench.Proto) *proxyCell {
	return m.cells[server+"|"+string(p)]
}

// measureProxyRun loads srv with one protocol's load and reads its CPU around the run.
func measureProxyRun(ctx context.Context, sched proxySchedule, load baselineLoad, srv *server, origin *process, name string, round int) (proxyRun, error) {
	run := proxyRun{Server: name, Proto: load.proto, Round: round + 1}
	if err := srv.alive(); err != nil {
		return run, err
	}
	cpu0, err := srv.cpu()
	if err != nil {
		return run, err
	}
	ocpu0, err := origin.cpu()
	if err != nil {
		return run, err
	}
	res, err := runLoad(ctx, bench.Config{
		URL: srv.url("/api/x"), Proto: load.proto, Connections: load.conns, Streams: load.streams,
		Duration: sched.dur, Warmup: sched.warm, Timeout: 5 * time.Second, Pins: []string{srv.pin},
	})
	if err != nil {
		return run, err
	}
	cpu1, err := srv.cpu()
	if err != nil {
		return run, err
	}
	ocpu1, err := origin.cpu()
	if err != nil {
		return run, err
	}
	total := res.RequestsPerSecond * (sched.warm + res.Duration).Seconds()
	if total > 0 {
		run.CPUPerRequestUs = float64(cpu1-cpu0) / float64(time.Microsecond) / total
		run.OriginCPUPerRequestUs = float64(ocpu1-ocpu0) / float64(time.Microsecond) / total
	}
	for _, n := range res.Errors {
		run.Errors += n
	}
	run.Non200 = res.Responses - res.Status[200]
	run.RequestsPerSecond = res.RequestsPerSecond
	return run, nil
}
