//go:build !amd64

package bitshuffle

// useAVX2 is false where there is no assembly transpose.
var useAVX2 = false

// shuffleFast does nothing where there is no assembly transpose.
func shuffleFast(dst, src []byte, elemSize, n int) int { return 0 }

// useGFNI is false where there is no assembly transpose.
var useGFNI = false
