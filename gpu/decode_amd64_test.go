package gpu

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestBitplane24AVX2MatchesPortable cross-checks the assembly gathers,
// the AVX-512 one where the CPU has it and the AVX2 one, with the portable
// decoder for both codings, both orientations and chip widths around
// their 256- and 32-pixel groups (widths they cannot take fall back).
func TestBitplane24AVX2MatchesPortable(t *testing.T) {
	if !useAVX2 {
		t.Skip("CPU has no AVX2: the assembly gather never runs here")
	}
	for _, gfni := range []bool{false, true} {
		if gfni && !useGFNI {
			t.Log("CPU has no AVX-512 VBMI and GFNI: only the AVX2 gather is checked")
			continue
		}
		saved := useGFNI
		useGFNI = gfni
		t.Run(map[bool]string{false: "avx2", true: "avx512-gfni"}[gfni], testBitplane24Fast)
		useGFNI = saved
	}
}

func testBitplane24Fast(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, w := range []int{8, 32, 64, 96, 224, 256, 288, 512, 768} {
		row := make([]byte, 3*w)
		for i := range row {
			row[i] = byte(rng.Uint32())
		}
		scratch := make([]uint32, w)
		for _, lfsr := range []bool{false, true} {
			for _, rotated := range []bool{false, true} {
				want := make([]byte, 4*w)
				bitplane24(want, row, lfsr, rotated)
				got := make([]byte, 4*w)
				ok := bitplane24Fast(got, row, lfsr, rotated, scratch)
				if ok != (w%32 == 0) {
					t.Fatalf("width %d: fast path ran %v, want %v", w, ok, w%32 == 0)
				}
				if ok && !bytes.Equal(got, want) {
					t.Fatalf("width %d lfsr %v rotated %v: AVX2 gather differs from the portable decoder", w, lfsr, rotated)
				}
			}
		}
	}
}

// TestBitplaneRowsMatchesPortable cross-checks the AVX-512 decode of a
// band of 24- and 12-bit chip rows in one call with the portable decoder,
// row by row, for both codings, chip widths of one to three 256-pixel
// blocks, bands that start past the chip's first row, and image rows wider
// than the chip (the bytes between its pieces must stay as they were); and
// the 12-bit decode of one row of a rotated chip. They must decline widths
// that are not a multiple of 256.
func TestBitplaneRowsMatchesPortable(t *testing.T) {
	if !useGFNI {
		t.Skip("CPU has no AVX-512 VBMI and GFNI: the band decode never runs here")
	}
	for _, c := range []struct {
		depth, pix int
		rows       func(dst []byte, stride int, chip []byte, r0, r1, w int, lfsr bool) bool
		portable   func(dst, row []byte, lfsr, rotated bool)
	}{
		{24, 4, bitplane24Rows, bitplane24},
		{12, 2, bitplane12Rows, bitplane12},
	} {
		rng := rand.New(rand.NewPCG(11, uint64(c.depth)))
		for _, w := range []int{256, 512, 768} {
			const chipRows = 6
			rowBytes := c.depth * w / 8
			chip := make([]byte, chipRows*rowBytes)
			for i := range chip {
				chip[i] = byte(rng.Uint32())
			}
			// A row whose high planes are all 0 (24-bit counts under 4096,
			// whose high look-up is skipped).
			clear(chip[3*rowBytes : 3*rowBytes+12*w/8])
			for _, lfsr := range []bool{false, true} {
				for _, band := range [][2]int{{0, 1}, {0, chipRows}, {2, 5}, {5, 6}} {
					r0, r1 := band[0], band[1]
					stride := c.pix*w + 68
					got := bytes.Repeat([]byte{0xA5}, (r1-r0)*stride)
					if !c.rows(got, stride, chip, r0, r1, w, lfsr) {
						t.Fatalf("%d-bit width %d: band decode declined", c.depth, w)
					}
					for r := r0; r < r1; r++ {
						want := make([]byte, c.pix*w)
						c.portable(want, chip[r*rowBytes:(r+1)*rowBytes], lfsr, false)
						line := got[(r-r0)*stride : (r-r0+1)*stride]
						if !bytes.Equal(line[:c.pix*w], want) {
							t.Fatalf("%d-bit width %d lfsr %v rows [%d, %d): row %d differs from the portable decoder", c.depth, w, lfsr, r0, r1, r)
						}
						if !bytes.Equal(line[c.pix*w:], bytes.Repeat([]byte{0xA5}, 68)) {
							t.Fatalf("%d-bit width %d lfsr %v rows [%d, %d): bytes between rows written", c.depth, w, lfsr, r0, r1)
						}
					}
				}
				if c.depth == 12 {
					row := chip[:rowBytes]
					want := make([]byte, 2*w)
					bitplane12(want, row, lfsr, true)
					got := make([]byte, 2*w)
					if !bitplane12Fast(got, row, lfsr, true, make([]uint32, w)) || !bytes.Equal(got, want) {
						t.Fatalf("12-bit width %d lfsr %v: rotated row differs from the portable decoder", w, lfsr)
					}
				}
			}
		}
		for _, w := range []int{8, 32, 224, 288} {
			if c.rows(make([]byte, c.pix*w), c.pix*w, make([]byte, c.depth*w/8), 0, 1, w, true) {
				t.Errorf("%d-bit width %d: band decode ran, want it to decline", c.depth, w)
			}
		}
	}
}

// TestLFSR24AVX2MatchesPortable cross-checks the gathers, AVX-512 where the
// CPU has it and AVX2, with the portable look-up at lengths around the 16-
// and 8-code groups, on codes of any count and on codes of counts under
// 4096 (the high half code 0, its look-up skipped), mixed within a group
// too.
func TestLFSR24AVX2MatchesPortable(t *testing.T) {
	if !useAVX2 {
		t.Skip("CPU has no AVX2: the assembly look-up never runs here")
	}
	for _, gfni := range []bool{false, true} {
		if gfni && !useGFNI {
			t.Log("CPU has no AVX-512 VBMI and GFNI: only the AVX2 gathers are checked")
			continue
		}
		saved := useGFNI
		useGFNI = gfni
		t.Run(map[bool]string{false: "avx2", true: "avx512"}[gfni], testLFSR24Fast)
		useGFNI = saved
	}
}

func testLFSR24Fast(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 255, 256, 1536, 4099} {
		for _, kind := range []string{"any", "low", "mixed"} {
			codes := make([]uint32, n)
			for i := range codes {
				codes[i] = rng.Uint32() & 0xFFFFFF
				if kind == "low" || kind == "mixed" && rng.IntN(8) != 0 {
					codes[i] &= 0xFFF
				}
			}
			if n >= 2 {
				codes[0], codes[n-1] = 0xFFF, 0 // the table's two ends
			}
			want := slices.Clone(codes)
			lfsr24(want)
			got := slices.Clone(codes)
			lfsr24Fast(got)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%d %s codes: code %06x gives %d, want %d", n, kind, codes[i], got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkLFSR24 times the look-up of a Pi-mega chip row's codes, the
// portable loop beside the AVX2 gathers, for counts of any size and for
// counts under 4096 (a frame at a short exposure).
func BenchmarkLFSR24(b *testing.B) {
	for _, counts := range []string{"any", "under4096"} {
		rng := rand.New(rand.NewPCG(1, 2))
		codes := make([]uint32, 1536)
		for i := range codes {
			codes[i] = rng.Uint32() & 0xFFFFFF
			if counts == "under4096" {
				codes[i] &= 0xFFF
			}
		}
		work := make([]uint32, len(codes))
		for _, bc := range []struct {
			name string
			f    func([]uint32)
			ok   bool
		}{{"portable", lfsr24, true}, {"avx2", lfsr24Fast, useAVX2}} {
			b.Run(counts+"/"+bc.name, func(b *testing.B) {
				if !bc.ok {
					b.Skip("no AVX2")
				}
				b.SetBytes(int64(4 * len(codes)))
				b.ReportAllocs()
				for b.Loop() {
					copy(work, codes)
					bc.f(work)
				}
			})
		}
	}
}

// TestCPUInstructionsNamesChoice checks that the name the backend gives
// its decode path follows the features the paths are chosen by, and that
// the backend logs it at debug level when it starts.
func TestCPUInstructionsNamesChoice(t *testing.T) {
	savedAVX2, savedGFNI := useAVX2, useGFNI
	defer func() { useAVX2, useGFNI = savedAVX2, savedGFNI }()
	for _, c := range []struct {
		avx2, gfni bool
		want       string
	}{
		{false, false, "portable Go"},
		{true, false, "AVX2"},
		{true, true, "AVX-512 VBMI+GFNI"},
	} {
		useAVX2, useGFNI = c.avx2, c.gfni
		if got := CPUInstructions(); got != c.want {
			t.Errorf("AVX2 %v, GFNI %v: %q, want %q", c.avx2, c.gfni, got, c.want)
		}
		var logged bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
		be, err := New("cpu", Options{Workers: 1, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		be.Close()
		if want := fmt.Sprintf(`"instructions":%q`, c.want); !strings.Contains(logged.String(), want) {
			t.Errorf("AVX2 %v, GFNI %v: log %q does not say %s", c.avx2, c.gfni, logged.String(), want)
		}
		wantPacked := map[string]string{"portable Go": "portable Go", "AVX2": "AVX2", "AVX-512 VBMI+GFNI": "AVX-512 VBMI"}[c.want]
		for _, want := range []string{
			"bitplane 24-bit: " + c.want,
			"bitplane 12-bit: " + c.want,
			"bitplane 6- and 1-bit: " + c.want,
			"packed12, packed24: " + wantPacked,
			"u16le, u32le: memmove (" + wantPacked + " for chips at 180 degrees)",
		} {
			if !strings.Contains(logged.String(), want) {
				t.Errorf("AVX2 %v, GFNI %v: log %q does not say %s", c.avx2, c.gfni, logged.String(), want)
			}
		}
	}
}
