package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
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

// cgroupLimit parses a cgroup v2 memory.max file: a byte count, or "max" for none.
func cgroupLimit(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}
