//go:build !race

package compress

// raceEnabled reports a build with the race detector, whose
// instrumentation allocates where the code itself does not.
const raceEnabled = false
