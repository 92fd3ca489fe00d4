package scenario

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/h3edge/h3edge/bench/attack"
)

// What quic-initial-flood measures beside the common figures: h3edge's tracked
// per-source state, polled from its metrics through the flood, and the datagrams its
// kernel socket dropped (a full receive buffer: h3edge did not keep up), so that the CPU
// it spent can be divided by the Initials it read.

// floodFigures is quic-initial-flood's part of an attack report.
type floodFigures struct {
	Initials int64 `json:"initials_sent"`
	Retries  int64 `json:"retries_received"`
	// Handshakes counts the spoofed sources answered with a ServerHello, as the attacker
	// saw them: an undercount when h3edge answers after the attacker stopped listening
	// (300 ms after its last Initial) or its socket overflowed.
	Handshakes  int64 `json:"handshakes_begun"`
	Refused     int64 `json:"refused"`      // spoofed sources answered with a CONNECTION_CLOSE
	KernelDrops int64 `json:"kernel_drops"` // dropped_datagrams_total{reason="kernel"} during the flood
	// Read is Initials − KernelDrops: what h3edge's socket handed it.
	Read int64 `json:"initials_read"`
	// CPUPerInitialUs is h3edge's CPU during the flood ÷ Read (the legitimate load's
	// share included: ~200 requests a second).
	CPUPerInitialUs float64 `json:"cpu_per_initial_us"`
	PeakTracked     int64   `json:"peak_tracked_sources"`
	MaxTracked      int64   `json:"max_tracked"`
	// HandshakeBound is what the check allows: retry_above × (the flood's seconds + 1).
	HandshakeBound int64 `json:"handshake_bound"`
}

// floodWatch polls tracked_sources every 100 ms and reads the kernel drops at its
// start and end.
type floodWatch struct {
	admin netip.AddrPort

	mu          sync.Mutex
	peak        float64
	drops0      float64
	drops1      float64
	started, ok bool
}

const (
	metricTracked     = "h3edge_tracked_sources"
	metricKernelDrops = `h3edge_dropped_datagrams_total{reason="kernel"}`
)

func (w *floodWatch) run(ctx context.Context) { pollEvery(ctx, 100*time.Millisecond, w.poll) }

func (w *floodWatch) poll(ctx context.Context) {
	m, err := scrapeMetrics(ctx, w.admin)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peak = max(w.peak, m[metricTracked])
	if !w.started {
		w.started, w.drops0 = true, m[metricKernelDrops]
	}
	w.drops1, w.ok = m[metricKernelDrops], true
}

// figures completes the flood's figures once the flood and the polling have ended.
func (w *floodWatch) figures(ctx context.Context, out *attack.Outcome, cpu, flood time.Duration) *floodFigures {
	w.poll(ctx) // the last drops
	w.mu.Lock()
	defer w.mu.Unlock()
	f := &floodFigures{
		Initials: out.Sent, Retries: out.Retries, Handshakes: out.Conns, Refused: out.Refused,
		KernelDrops: int64(w.drops1 - w.drops0), PeakTracked: int64(w.peak), MaxTracked: floodMaxTracked,
		HandshakeBound: int64(floodRetryAbove * (flood.Seconds() + 1)),
	}
	f.Read = f.Initials - f.KernelDrops
	if f.Read > 0 {
		f.CPUPerInitialUs = float64(cpu.Microseconds()) / float64(f.Read)
	}
	return f
}
