//go:build race

package penalty

// raceEnabled scales down the tests that would take minutes under the race detector.
const raceEnabled = true
