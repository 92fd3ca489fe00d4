//go:build !race

package penalty

const raceEnabled = false
