package frame

// Medipix3RX counters step through pseudo-random (LFSR) codes rather than
// binary counts. lfsr12 and lfsr6 map a count to its code (Code) and a code
// to its count (Count); both are permutations, built once.
var (
	lfsr12 = makeLFSR(12, func(code uint16) uint16 {
		f := (code ^ code>>3 ^ code>>5 ^ code>>11) & 1
		if code&0x7FF == 0 {
			f ^= 1
		}
		return f
	})
	lfsr6 = makeLFSR(6, func(code uint16) uint16 {
		f := (code ^ code>>5) & 1
		if code&0x1F == 0 {
			f ^= 1
		}
		return f
	})
)

// lfsrTable holds one counter's sequence in both directions.
type lfsrTable struct {
	Code  []uint16 // count -> code
	Count []uint16 // code -> count
}

func makeLFSR(bits uint, feedback func(uint16) uint16) lfsrTable {
	n := 1 << bits
	mask := uint16(n - 1)
	t := lfsrTable{Code: make([]uint16, n), Count: make([]uint16, n)}
	code := uint16(0)
	for count := range n {
		t.Code[count] = code
		t.Count[code] = uint16(count)
		code = (code<<1 | feedback(code)) & mask
	}
	return t
}

// LFSRCountTable returns the table that maps a counter code to its count for
// a 12-bit or 6-bit Medipix3 counter, indexed by code. The table is shared:
// callers must not modify it. It returns nil for other widths.
func LFSRCountTable(bits int) []uint16 {
	switch bits {
	case 12:
		return lfsr12.Count
	case 6:
		return lfsr6.Count
	}
	return nil
}

// CounterCode returns the code a counter of the format holds after count
// events. count must not exceed f.MaxCount.
func (f Format) CounterCode(count uint32) uint32 {
	if f.Coding != LFSR {
		return count
	}
	switch f.BitDepth {
	case 6:
		return uint32(lfsr6.Code[count&0x3F])
	case 12:
		return uint32(lfsr12.Code[count&0xFFF])
	case 24:
		return uint32(lfsr12.Code[count>>12&0xFFF])<<12 | uint32(lfsr12.Code[count&0xFFF])
	}
	return count
}

// CounterCount returns the count that a counter code of the format stands for.
func (f Format) CounterCount(code uint32) uint32 {
	if f.Coding != LFSR {
		return code
	}
	switch f.BitDepth {
	case 6:
		return uint32(lfsr6.Count[code&0x3F])
	case 12:
		return uint32(lfsr12.Count[code&0xFFF])
	case 24:
		return uint32(lfsr12.Count[code>>12&0xFFF])<<12 | uint32(lfsr12.Count[code&0xFFF])
	}
	return code
}
