//go:build race

package serve

// raceEnabled is true when the tests run under the race detector, which
// makes the pipeline many times slower.
const raceEnabled = true
