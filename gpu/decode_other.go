//go:build !amd64

package gpu

// useAVX2 is false where there is no assembly gather.
var useAVX2 = false

// bitplane24Fast reports that there is no assembly gather here.
func bitplane24Fast(dst, row []byte, lfsr, rotated bool, scratch []uint32) bool { return false }

// bitplane12Fast reports that there is no assembly gather here.
func bitplane12Fast(dst, row []byte, lfsr, rotated bool, scratch []uint32) bool { return false }

// cpuInstructions names the decode path: the portable one.
func cpuInstructions() string { return "portable Go" }

// cpuDecodePaths names the decode of each encoding: all portable here.
func cpuDecodePaths() []DecodePath {
	return []DecodePath{
		{"bitplane 24-, 12-, 6- and 1-bit", "portable Go"},
		{"packed12, packed24", "portable Go"},
		{"u16le, u32le", "memmove (portable Go for chips at 180 degrees)"},
	}
}
