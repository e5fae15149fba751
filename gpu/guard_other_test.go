//go:build !linux

package gpu

import "testing"

// guardedBytes returns n bytes; only on Linux does a page no one may read
// follow them.
func guardedBytes(tb testing.TB, n int) []byte { return make([]byte, n) }

// guardedAfter returns n bytes; only on Linux does a page no one may read
// or write come before them.
func guardedAfter(tb testing.TB, n int) []byte { return make([]byte, n) }
