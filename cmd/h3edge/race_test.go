//go:build race

package main

// raceEnabled: the tests run under the race detector, so the binary they start is built
// with it too, and a data race in h3edge under the tests' traffic fails them.
const raceEnabled = true
