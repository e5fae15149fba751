package compress

import "golang.org/x/sys/cpu"

// useAVX2 says whether matchEnd compares with AVX2; it is set once from
// the CPU's features (and by tests, to cross-check the pure-Go loop).
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasBMI1

// equalPrefixAVX2 returns how many leading bytes of a and b are equal,
// looking at no more than blocks*32 bytes of each.
//
//go:noescape
func equalPrefixAVX2(a, b *byte, blocks int) int

// equalPrefix32 returns how many leading bytes of src[m:] and src[m-off:]
// are equal, looking at a multiple of 32 bytes up to len(src)-m, with AVX2,
// or -1 where it does not run.
func equalPrefix32(src []byte, m, off int) int {
	blocks := (len(src) - m) / 32
	if !useAVX2 || blocks == 0 || off <= 0 || off > m {
		return -1
	}
	return equalPrefixAVX2(&src[m], &src[m-off], blocks)
}
