//go:build !amd64

package gpu

// useAVX2 is false where there is no assembly gather.
var useAVX2 = false

// bitplane24Fast reports that there is no assembly gather here.
func bitplane24Fast(dst, row []byte, lfsr, rotated bool, scratch []uint32) bool { return false }

// cpuInstructions names the decode path: the portable one.
func cpuInstructions() string { return "portable Go" }
