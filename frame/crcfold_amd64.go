package frame

import (
	"hash/crc32"

	cpuid "golang.org/x/sys/cpu"
)

// useFold says whether crc32cFold runs: it needs AVX-512 (F, VL) with the
// 512-bit carry-less multiply, and SSE4.2. It is set once from the CPU's
// features (and by tests, to cross-check).
var useFold = cpuid.X86.HasAVX512F && cpuid.X86.HasAVX512VL && cpuid.X86.HasAVX512VPCLMULQDQ && cpuid.X86.HasSSE42

// foldMin is the shortest buffer crc32cFold takes: below it the set-up
// costs more than the standard library's three-way loop.
const foldMin = 1024

// crc32cFold returns the CRC-32C register after the n bytes at p, from
// register crc (no conditioning). n is a multiple of 256, at least 256.
//
//go:noescape
func crc32cFold(crc uint32, p *byte, n int, consts *[16]uint64) uint32

// update is crc32.Update with the Castagnoli table, folding the bulk of a
// long buffer with carry-less multiplies where the CPU has them.
func update(crc uint32, p []byte) uint32 {
	if useFold && len(p) >= foldMin {
		n := len(p) &^ 255
		crc = ^crc32cFold(^crc, &p[0], n, &foldConsts)
		p = p[n:]
	}
	return crc32.Update(crc, castagnoli, p)
}
