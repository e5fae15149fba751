//go:build !amd64

package compress

// useAVX2 is false where there is no assembly comparison.
var useAVX2 = false

// equalPrefix32 returns -1: the pure-Go loop of matchEnd does the work.
func equalPrefix32(src []byte, m, off int) int { return -1 }
