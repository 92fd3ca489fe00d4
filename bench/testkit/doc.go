// Package testkit is what the tests of every package share to run real peers on
// loopback, and what bench/scenario's own process management shares with them: free
// ports ([FreePort]), a redis-server per test ([StartRedis]), waiting for a condition
// ([WaitFor]), tools a test needs, which skip it locally and fail it under CI=true
// ([Need], [Require]), the instant a phase of a rate window begins ([NextPhase]) and a
// check of SVG output ([CheckSVG]).
//
// It imports only the standard library, not even testing: its helpers take the narrow
// [T], which *testing.T and *testing.B satisfy, so that the h3bench binary, which uses
// FreePort and NextPhase, links no test framework. Any package's tests may import it
// (cmd/internal/importcheck has its row); it lives under bench because the top level is
// fixed and an internal/ directory would hide it from the other packages.
package testkit

// T is what the helpers need of a test or benchmark; *testing.T and *testing.B
// satisfy it.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}
