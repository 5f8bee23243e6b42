//go:build !race

package verify

// raceEnabled: this test binary has the race detector.
const raceEnabled = false
