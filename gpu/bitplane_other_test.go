//go:build !amd64

package gpu

import "testing"

// decodePath is the one decode path here, portable Go.
type decodePath struct{ name string }

// decodePaths returns the paths this CPU can run: portable Go.
func decodePaths() []decodePath { return []decodePath{{"portable"}} }

// use does nothing: portable Go is the only path here.
func (decodePath) use(testing.TB) {}
