package main

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// gcPercent is the GOGC h3edge runs with unless the environment sets one; the bare
// baseline server uses the same (scenario.UseEdgeGC in bench/scenario).
const gcPercent = 400

// tuneGC sets the garbage collector for a proxy's heap, unless the operator has set it
// through the environment. h3edge's live heap is small and bounded (capped tables, the
// state of open connections) while every request leaves garbage behind, so with Go's
// default GOGC=100 the collector runs every few megabytes allocated. With GOGC=400 the
// heap may grow to five times what is live between collections: +15–17 % HTTP/3
// requests/s and +6–8 % HTTP/2 in the measurements of README.md (Performance).
//
// A larger heap must not get the process killed: when GOMEMLIMIT is not set and the
// process runs under a cgroup memory limit, 90 % of that limit becomes Go's soft memory
// limit, so the collector works harder as the heap nears it. It returns the settings
// applied (0 where the environment's, or nothing, applies) for the start-up log.
func tuneGC() (gogc int, memLimit int64) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
		gogc = gcPercent
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
			if n, ok := cgroupLimit(string(b)); ok {
				memLimit = n / 10 * 9
				debug.SetMemoryLimit(memLimit)
			}
		}
	}
	return gogc, memLimit
}

// gcHeadroom is the most garbage followHeap lets the heap hold above what is live:
// GOGC=400 gives a live heap of 12 MiB its 48 MiB, and a larger live heap (connections
// held by the thousand: slow readers, slowloris) the same 48 MiB, down to GOGC=100 from
// 48 MiB live. With GOGC=400 throughout, 1 000 slow readers (40 MiB live, README
// Attacks) let the heap reach 200 MiB before a collection: 136–172 KiB of RSS per held
// connection, of which ~60 KiB were theirs.
const gcHeadroom = 48 << 20

// gcFollowEvery is how often followHeap reads the live heap.
const gcFollowEvery = 100 * time.Millisecond

// gcPercentFor returns the GOGC that gives a live heap of live bytes gcHeadroom of
// garbage, between 100 (Go's default) and gcPercent.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return gcPercent
	}
	return int(max(100, min(gcPercent, uint64(gcHeadroom)*100/live)))
}

// followHeap keeps GOGC at gcPercentFor the live heap, read every gcFollowEvery from
// runtime/metrics, until done is closed. It changes GOGC only when the value moves by
// a tenth or more (debug.SetGCPercent stops the world for a moment). Run it only when
// tuneGC set GOGC: an operator's GOGC is left alone.
func followHeap(done <-chan struct{}) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	cur := gcPercent
	t := time.NewTicker(gcFollowEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return // not this runtime's metric: GOGC stays as tuneGC set it
		}
		if want := gcPercentFor(sample[0].Value.Uint64()); 10*abs(want-cur) >= cur {
			debug.SetGCPercent(want)
			cur = want
		}
	}
}

func abs(n int) int { return max(n, -n) }

// cgroupLimit parses a cgroup v2 memory.max file: a byte count, or "max" for none.
func cgroupLimit(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}
