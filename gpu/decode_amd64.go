package gpu

import (
	"unsafe"

	cpuid "golang.org/x/sys/cpu"
)

// useAVX2 says whether the AVX2 bitplane gather runs, and useGFNI whether
// the AVX-512 one (VBMI byte permutes, GFNI bit transposes) takes the chip
// rows it can; they are set once from the CPU's features (and by tests,
// to cross-check).
var (
	useAVX2 = cpuid.X86.HasAVX2
	// The AVX-512 decodes leave some chips (rotated 24-bit ones, widths
	// that are not a multiple of theirs) to the AVX2 ones: without AVX2
	// (GODEBUG=cpu.avx2=off) none runs, so that what bench and the debug
	// log name is what decodes.
	useGFNI = useAVX2 && hasAll(avx512Needs)
)

// avx512Needs are the extensions the AVX-512 decodes use, by name, and
// whether the CPU has each: a virtual machine may report VBMI and GFNI
// without VL (the 128-bit EVEX loads) or DQ (KORTESTB), and must then get
// the AVX2 decodes rather than an illegal instruction.
var avx512Needs = map[string]bool{
	"AVX512F":    cpuid.X86.HasAVX512F,
	"AVX512BW":   cpuid.X86.HasAVX512BW,
	"AVX512DQ":   cpuid.X86.HasAVX512DQ,
	"AVX512VL":   cpuid.X86.HasAVX512VL,
	"AVX512VBMI": cpuid.X86.HasAVX512VBMI,
	"GFNI":       cpuid.X86.HasAVX512GFNI,
}

// hasAll reports whether every feature of needs is there.
func hasAll(needs map[string]bool) bool {
	for _, has := range needs {
		if !has {
			return false
		}
	}
	return true
}

// cpuInstructions names the widest decode path chosen above.
func cpuInstructions() string {
	switch {
	case useGFNI:
		return "AVX-512 VBMI+GFNI"
	case useAVX2:
		return "AVX2"
	}
	return "portable Go"
}

// cpuDecodePaths names what each encoding's decode uses here: bitplane
// chips of every depth the widest instructions named above (AVX-512 takes
// chips a multiple of 256 pixels wide at 24 and 12 bits, of 128 at 6 and
// of 64 at 1; AVX2 the others at least 32 pixels wide, at 24 bits a
// multiple of 32); packed12 and packed24, and the little-endian encodings
// of chips at 180 degrees, the vectors of packed_amd64.go; unrotated
// little-endian chips are copied (the runtime's memmove, itself vector
// moves).
func cpuDecodePaths() []DecodePath {
	return []DecodePath{
		{"bitplane 24-bit", cpuInstructions()},
		{"bitplane 12-bit", cpuInstructions()},
		{"bitplane 6- and 1-bit", cpuInstructions()},
		{"packed12, packed24", packedInstructions()},
		{"u16le, u32le", "memmove (" + packedInstructions() + " for chips at 180 degrees)"},
	}
}

// codes24GFNI is codes24AVX2 with AVX-512, over rows chip rows of
// blocks*256 pixels each, and the LFSR look-up too where table is not nil
// (lfsr12 widened to 32 bits). For each 64 pixels of a row it permutes the
// 8 planes' bytes of each code byte into one vector, so that each qword
// holds 8 pixels' bits of 8 planes, and transposes those 8x8 bit matrices
// with VGF2P8AFFINEQB; with a table, each 16 codes are then looked up with
// a gather before they are stored, the high halves only for runs of 128
// pixels with a code of 4096 or more. A row's codes go dstStride bytes
// after the last row's, read rowStride bytes after it.
//
//go:noescape
func codes24GFNI(dst *uint32, row *byte, planeBytes, blocks, rows, dstStride, rowStride int, table *[4096]uint32)

// codes12GFNI is codes24GFNI for chip rows of 12 planes into 16-bit
// pixels: the high code bytes (planes 0-7) and the low nibbles (planes
// 8-11) are transposed as codes24GFNI transposes each code byte, and
// interleaved into words; LFSR codes are looked up 16 at a time.
//
//go:noescape
func codes12GFNI(dst *uint16, row *byte, planeBytes, blocks, rows, dstStride, rowStride int, table *[4096]uint32)

// codes24AVX2 gathers the 24-bit codes of groups*32 pixels from a chip row
// of 24 planes, planeBytes apart, most significant first, into dst in
// pixel order. For each plane it broadcasts 4 bytes (32 pixels), spreads
// their bits over 32 byte lanes with a shuffle, mask and compare, and
// shifts them into one accumulator per code byte.
//
//go:noescape
func codes24AVX2(dst *uint32, row *byte, planeBytes, groups int)

// lfsr24AVX2 turns groups*8 24-bit LFSR codes into counts in place, as
// lfsr24 does, looking up the 12-bit halves of 8 codes at once with AVX2
// gathers from table (lfsr12 widened to 32 bits); eight high halves that
// are all code 0 (count 0) need no look-up.
//
//go:noescape
func lfsr24AVX2(codes *uint32, groups int, table *[4096]uint32)

// lfsr24AVX512 is lfsr24AVX2 with AVX-512 gathers: groups*16 codes,
// sixteen at a time.
//
//go:noescape
func lfsr24AVX512(codes *uint32, groups int, table *[4096]uint32)

// lfsr12x32 is lfsr12 widened to 32-bit entries, for the gathers.
var lfsr12x32 = func() (t [4096]uint32) {
	for i, c := range lfsr12 {
		t[i] = uint32(c)
	}
	return t
}()

// lfsr24Fast is lfsr24 with the widest gathers the CPU has.
func lfsr24Fast(codes []uint32) {
	if m := len(codes) &^ 15; useGFNI && m > 0 {
		lfsr24AVX512(&codes[0], m/16, &lfsr12x32)
		codes = codes[m:]
	}
	n := len(codes) &^ 7
	if !useAVX2 || n == 0 {
		lfsr24(codes)
		return
	}
	lfsr24AVX2(&codes[0], n/8, &lfsr12x32)
	lfsr24(codes[n:])
}

// codes24 gathers the codes of a chip row of 24 planes of s bytes, s a
// multiple of 4, into dst, with the widest gather the CPU has, and turns
// LFSR codes into counts.
func codes24(dst []uint32, row []byte, s int, lfsr bool) {
	if useGFNI && s%32 == 0 {
		var table *[4096]uint32
		if lfsr {
			table = &lfsr12x32
		}
		codes24GFNI(&dst[0], &row[0], s, s/32, 1, 0, 0, table)
		return
	}
	codes24AVX2(&dst[0], &row[0], s, s/4)
	if lfsr {
		lfsr24Fast(dst)
	}
}

// bitplane24Rows decodes readout rows [r0, r1) of a chip at 0 degrees, w
// pixels wide, into image rows stride bytes apart from the start of dst,
// in one call, and reports whether it could: it needs the AVX-512 gather
// and a chip width that is a multiple of 256.
func bitplane24Rows(dst []byte, stride int, chip []byte, r0, r1, w int, lfsr bool) bool {
	if !useGFNI || w%256 != 0 || r1 <= r0 || stride < 4*w {
		return false
	}
	rowBytes := 3 * w
	_ = chip[r1*rowBytes-1]
	_ = dst[(r1-r0-1)*stride+4*w-1]
	var table *[4096]uint32
	if lfsr {
		table = &lfsr12x32
	}
	// amd64 is little-endian: the image row's bytes are its uint32 pixels.
	codes24GFNI((*uint32)(unsafe.Pointer(&dst[0])), &chip[r0*rowBytes], w/8, w/256, r1-r0, stride, rowBytes, table)
	return true
}

// bitplane12Rows is bitplane24Rows for 12-bit chips: readout rows
// [r0, r1) of a chip at 0 degrees, w pixels wide, into image rows of
// 16-bit pixels stride bytes apart from the start of dst. It needs the
// AVX-512 gather and a chip width that is a multiple of 256.
func bitplane12Rows(dst []byte, stride int, chip []byte, r0, r1, w int, lfsr bool) bool {
	if !useGFNI || w%256 != 0 || r1 <= r0 || stride < 2*w {
		return false
	}
	rowBytes := 3 * w / 2
	_ = chip[r1*rowBytes-1]
	_ = dst[(r1-r0-1)*stride+2*w-1]
	var table *[4096]uint32
	if lfsr {
		table = &lfsr12x32
	}
	codes12GFNI((*uint16)(unsafe.Pointer(&dst[0])), &chip[r0*rowBytes], w/8, w/256, r1-r0, stride, rowBytes, table)
	return true
}

// bitplane12Fast decodes like bitplane12 with the AVX-512 gather and
// reports whether it could, as bitplane12Rows; a rotated chip's row is
// gathered into scratch (at least ChipWidth/2 words), then reversed into
// dst.
func bitplane12Fast(dst, row []byte, lfsr, rotated bool, scratch []uint32) bool {
	w := 8 * len(row) / 12
	if !rotated {
		return bitplane12Rows(dst, 2*w, row, 0, 1, w, lfsr)
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(scratch))), 4*len(scratch))
	if len(buf) < 2*w || !bitplane12Rows(buf, 2*w, row, 0, 1, w, lfsr) {
		return false
	}
	reverse16Vector(dst[:2*w], buf[:2*w]) // whole vectors: w is a multiple of 256
	return true
}

// bitplane24Fast decodes like bitplane24, with the AVX2 gather, and reports
// whether it could: it needs AVX2 and a chip width that is a multiple of
// 32. A chip at 0 degrees is gathered straight into dst; a rotated one
// into scratch (ChipWidth codes), then reversed into dst.
func bitplane24Fast(dst, row []byte, lfsr, rotated bool, scratch []uint32) bool {
	s := len(row) / 24
	if !useAVX2 || s == 0 || s%4 != 0 {
		return false
	}
	n := 8 * s
	_ = dst[4*n-1]
	// amd64 is little-endian: the image row's bytes are its uint32 pixels.
	out := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), n)
	if !rotated {
		codes24(out, row, s, lfsr)
		return true
	}
	codes := scratch[:n]
	codes24(codes, row, s, lfsr)
	done := reverse32Vector(dst[:4*n], unsafe.Slice((*byte)(unsafe.Pointer(&codes[0])), 4*n))
	for i, c := range codes[done:] {
		out[n-1-done-i] = c
	}
	return true
}
