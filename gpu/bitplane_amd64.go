package gpu

// This file holds the vector decoders of 12-, 6- and 1-bit bitplane chips
// into 16-bit pixels, the 12-bit ones for CPUs without AVX-512 VBMI and GFNI
// (those with it take codes12GFNI for chips a multiple of 256 pixels wide).
// Each decodes a band of a chip's readout rows in one call, for both chip
// orientations: a chip at 180 degrees has its rows written bottom up and
// its pixels right to left, by tables that pick each pixel's bit in image
// order, so that reversing costs nothing.

// spreadTables steer the decoders that spread a plane's bytes over byte
// lanes, one lane per pixel: lane i, in image order, takes the byte
// shuffle[i] of the plane bytes loaded (broadcast to every dword or qword)
// and tests its bit bits[i].
type spreadTables struct {
	shuffle, bits [64]byte
}

// makeSpreadTables returns the tables of n pixels (32 for AVX2, whose
// lanes take a broadcast dword; 64 for AVX-512, a broadcast qword), left to
// right or, reversed, right to left.
func makeSpreadTables(n int, reversed bool) (t spreadTables) {
	for i := range n {
		q := i // the pixel lane i takes, within the n
		if reversed {
			q = n - 1 - i
		}
		t.shuffle[i] = byte(q / 8)
		t.bits[i] = 0x80 >> (q % 8)
	}
	return t
}

// gfni6Tables steer bits6GFNI: index[h] permutes 16 bytes of each of 6
// planes (planes 0-3 in one vector, 4-5 in a second whose upper half is
// zero) so that qword j of the result holds the plane bytes of pixels
// 8j..8j+7 of the h-th 64 of a 128-pixel group, plane p in byte 2+p and
// zero in bytes 0 and 1; bits is the GF2P8AFFINEQB operand that transposes
// each qword into one code per byte, pixels in image order.
type gfni6Tables struct {
	index [2][64]byte
	bits  uint64
}

func makeGFNI6Tables(reversed bool) (t gfni6Tables) {
	for h := range 2 {
		for j := range 8 {
			b := 8*h + j // the plane byte of output qword j
			if reversed {
				b = 15 - b
			}
			t.index[h][8*j] = 0x60 // zero: the second vector's upper half
			t.index[h][8*j+1] = 0x60
			for p := range 6 {
				t.index[h][8*j+2+p] = byte(16*p + b)
			}
		}
	}
	t.bits = 0x0102040810204080 // byte i picks bit 7-i: pixel i first
	if reversed {
		t.bits = 0x8040201008040201
	}
	return t
}

// The tables of each orientation, [0] for 0 degrees and [1] for 180.
var (
	spread32 = [2]spreadTables{makeSpreadTables(32, false), makeSpreadTables(32, true)}
	spread64 = [2]spreadTables{makeSpreadTables(64, false), makeSpreadTables(64, true)}
	gfni6    = [2]gfni6Tables{makeGFNI6Tables(false), makeGFNI6Tables(true)}
)

// lfsr6x8 is lfsr6 in bytes, for byte permutes and shuffles.
var lfsr6x8 = func() (t [64]byte) {
	for i, c := range lfsr6 {
		t[i] = byte(c)
	}
	return t
}()

// The kernels below decode rows chip rows of groups groups of pixels into
// 16-bit pixels: the row at row, its planes planeBytes apart (most
// significant first), the next row rowStride bytes on. A row's first group
// goes to dst, each next group step bytes on (negative for a chip at 180
// degrees, whose tables reverse each group), the next row's dstStride bytes
// on from where the row started. A group is 32 pixels for AVX2, 64 (1-bit)
// or 128 (6-bit) for AVX-512; lut, where not nil, turns LFSR codes into
// counts.

// bits1AVX2 decodes 1-bit rows, 32 pixels a group: for each it broadcasts
// the plane's 4 bytes and spreads their bits over byte lanes by tabs.
//
//go:noescape
func bits1AVX2(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *spreadTables)

// bits6AVX2 decodes 6-bit rows as bits1AVX2 does each plane, shifting the
// planes' bits into one code byte per pixel; LFSR codes are looked up in
// lut (lfsr6x8) by four shuffles of 16 entries and two blends.
//
//go:noescape
func bits6AVX2(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *spreadTables, lut *[64]byte)

// bits12AVX2 decodes 12-bit rows as bits6AVX2, the high 8 bits of each
// code in one byte and the low 4 in another, interleaved into words; LFSR
// codes are looked up in lut (lfsr12x32) by 8-wide gathers.
//
//go:noescape
func bits12AVX2(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *spreadTables, lut *[4096]uint32)

// bits1AVX512 decodes 1-bit rows, 64 pixels a group: the plane's 8 bytes
// are broadcast and spread by a shuffle, tested into a mask by tabs, and
// the mask picks words of 1 or 0.
//
//go:noescape
func bits1AVX512(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *spreadTables)

// bits6GFNI decodes 6-bit rows, 128 pixels a group: a VPERMB of 16 bytes of
// every plane puts the 6 planes' bytes of 8 pixels in each qword, and
// VGF2P8AFFINEQB transposes those bit matrices into one code byte per
// pixel, as codes24GFNI does each code byte; LFSR codes are looked up with
// one VPERMB of lut (lfsr6x8).
//
//go:noescape
func bits6GFNI(dst, row *byte, planeBytes, groups, rows, step, dstStride, rowStride int, tabs *gfni6Tables, lut *[64]byte)

// bitplaneBand decodes readout rows [r0, r1) of a bitplane chip of depth
// bits, w pixels wide, into the band of image rows that starts at dst,
// stride bytes apart: readout row r0 in the band's top row for a chip at 0
// degrees, in its bottom row and reversed for a chip at 180 degrees. It
// reports whether it could, with the widest decode here that takes the
// chip; if not, the caller decodes row by row (bitplane24Fast and
// bitplane12Fast for the rotated chips of 24 bits, and of 12 bits with
// AVX-512).
//
// 12-, 6- and 1-bit chips take AVX2 when they are at least 32 pixels wide,
// the pixels past the last 32 decoded by the portable decoders; the
// AVX-512 decoders take 12-bit chips at 0 degrees a multiple of 256 pixels
// wide, 6-bit ones a multiple of 128 and 1-bit ones a multiple of 64.
func bitplaneBand(dst []byte, stride int, chip []byte, r0, r1, w, depth int, lfsr, rotated bool) bool {
	switch depth {
	case 24:
		return !rotated && bitplane24Rows(dst, stride, chip, r0, r1, w, lfsr)
	case 12:
		if useGFNI && w%256 == 0 {
			return !rotated && bitplane12Rows(dst, stride, chip, r0, r1, w, lfsr)
		}
	}
	group := 32
	wide := useGFNI && (depth == 6 && w%128 == 0 || depth == 1 && w%64 == 0)
	switch {
	case wide && depth == 6:
		group = 128
	case wide:
		group = 64
	case !useAVX2 || w < group:
		return false
	}
	if r1 <= r0 || stride < 2*w {
		return false
	}
	s := w / 8 // bytes a plane
	rowBytes := depth * s
	_ = chip[r1*rowBytes-1]
	_ = dst[(r1-r0-1)*stride+2*w-1]
	groups := w / group
	dir := 0
	first, step, dstStride := 0, 2*group, stride
	if rotated {
		dir = 1
		first, step, dstStride = (r1-r0-1)*stride+2*(w-group), -2*group, -stride
	}
	out, row := &dst[first], &chip[r0*rowBytes]
	switch {
	case wide && depth == 6:
		bits6GFNI(out, row, s, groups, r1-r0, step, dstStride, rowBytes, &gfni6[dir], lut6(lfsr))
	case wide:
		bits1AVX512(out, row, s, groups, r1-r0, step, dstStride, rowBytes, &spread64[dir])
	case depth == 12:
		var lut *[4096]uint32
		if lfsr {
			lut = &lfsr12x32
		}
		bits12AVX2(out, row, s, groups, r1-r0, step, dstStride, rowBytes, &spread32[dir], lut)
	case depth == 6:
		bits6AVX2(out, row, s, groups, r1-r0, step, dstStride, rowBytes, &spread32[dir], lut6(lfsr))
	default:
		bits1AVX2(out, row, s, groups, r1-r0, step, dstStride, rowBytes, &spread32[dir])
	}
	if c0 := groups * group; c0 < w {
		for r := r0; r < r1; r++ {
			y := r - r0
			if rotated {
				y = r1 - 1 - r
			}
			bitplaneTail(dst[y*stride:y*stride+2*w], chip[r*rowBytes:(r+1)*rowBytes], depth, c0, lfsr, rotated)
		}
	}
	return true
}

// lut6 returns the 6-bit LFSR table for the kernels, or nil for coding 0.
func lut6(lfsr bool) *[64]byte {
	if lfsr {
		return &lfsr6x8
	}
	return nil
}

// bitplaneTail decodes pixels [c0, w) of a readout row of a chip of depth
// bits (12 or fewer) with the portable decoder, into dst, the row's piece
// of an image row: each plane's bytes of those pixels are copied into one
// short row. c0 is a multiple of 8, and w-c0 under 32.
func bitplaneTail(dst, row []byte, depth, c0 int, lfsr, rotated bool) {
	s := len(row) / depth
	g0 := c0 / 8
	t := s - g0 // bytes a plane of the short row
	var buf [12 * 3]byte
	short := buf[:depth*t]
	for p := range depth {
		copy(short[p*t:(p+1)*t], row[p*s+g0:(p+1)*s])
	}
	out := dst[2*c0:]
	if rotated {
		out = dst[:2*8*t]
	}
	bitplaneSmall(out, short, depth, lfsr, rotated)
}

// bitplaneRow decodes one readout row of a 12-, 6- or 1-bit chip into dst
// like bitplane12, bitplane6 or bitplane1, with bitplaneBand, and reports
// whether it could.
func bitplaneRow(dst, row []byte, depth int, lfsr, rotated bool) bool {
	w := 8 * len(row) / depth
	return bitplaneBand(dst, 2*w, row, 0, 1, w, depth, lfsr, rotated)
}
