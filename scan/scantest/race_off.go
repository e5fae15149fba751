//go:build !race

package scantest

// Race is true when the tests run under the race detector, which makes
// the pipeline many times slower.
const Race = false
