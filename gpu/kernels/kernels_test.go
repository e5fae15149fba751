package kernels

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"h5ingest/frame"
)

// TestPTX checks that each embedded PTX targets its architecture and
// declares every kernel and global the host looks up, at the sizes it
// uploads.
func TestPTX(t *testing.T) {
	for _, target := range Targets(9, 0) {
		t.Run(target.Arch, func(t *testing.T) {
			ptx := target.PTX
			if !strings.HasSuffix(ptx, "\x00") || strings.Count(ptx, "\x00") != 1 {
				t.Errorf("PTX is not one NUL-terminated string")
			}
			for _, want := range []string{".target " + target.Arch + "\n", ".address_size 64"} {
				if !strings.Contains(ptx, want) {
					t.Errorf("PTX lacks %q", want)
				}
			}
			for _, k := range Kernels {
				if !regexp.MustCompile(`\.visible \.entry ` + k + `\(\s*\.param \.u64 \w+,\s*\.param \.u32 \w+\s*\)`).MatchString(ptx) {
					t.Errorf("PTX lacks kernel %s(u64, u32)", k)
				}
			}
			for name, b := range TableBytes() {
				re := regexp.MustCompile(`\.visible \.(const|global) \.align \d+ \.b8 ` + name + `\[(\d+)\];`)
				m := re.FindStringSubmatch(ptx)
				if m == nil {
					t.Errorf("PTX lacks global %s", name)
				} else if m[2] != strconv.Itoa(len(b)) {
					t.Errorf("global %s has %s bytes in the PTX, the host uploads %d", name, m[2], len(b))
				}
			}
		})
	}
}

// TestTargets checks which PTX a device of each compute capability is
// given, newest first: Hopper and newer both, best sm_90; Volta to Ada
// sm_70 only; older none.
func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		major, minor int
		want         string
	}{
		{12, 0, "sm_90 sm_70"}, {9, 0, "sm_90 sm_70"}, {8, 9, "sm_70"}, {8, 0, "sm_70"}, {7, 0, "sm_70"}, {6, 1, ""},
	} {
		var got []string
		for _, target := range Targets(tc.major, tc.minor) {
			got = append(got, target.Arch)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("compute capability %d.%d: %v, want %q", tc.major, tc.minor, got, tc.want)
		}
	}
}

// TestCRCTables checks the slicing-by-8 tables by running the kernels'
// algorithm in Go against hash/crc32.
func TestCRCTables(t *testing.T) {
	tab := CRCTables()
	ref := crc32.MakeTable(crc32.Castagnoli)
	if tab[0] != *ref {
		t.Fatal("bytewise table differs from hash/crc32's")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, n := range []int{0, 1, 7, 8, 9, 1023, 1024, 3000} {
		p := buf[:n]
		crc := ^uint32(0)
		for ; len(p) >= 8; p = p[8:] {
			lo := binary.LittleEndian.Uint32(p) ^ crc
			hi := binary.LittleEndian.Uint32(p[4:])
			crc = tab[7][lo&0xFF] ^ tab[6][lo>>8&0xFF] ^ tab[5][lo>>16&0xFF] ^ tab[4][lo>>24] ^
				tab[3][hi&0xFF] ^ tab[2][hi>>8&0xFF] ^ tab[1][hi>>16&0xFF] ^ tab[0][hi>>24]
		}
		for _, b := range p {
			crc = tab[0][byte(crc)^b] ^ crc>>8
		}
		if got, want := ^crc, crc32.Checksum(buf[:n], ref); got != want {
			t.Errorf("%d bytes: %08x, want %08x", n, got, want)
		}
	}
}

// TestLayout checks the work counts of a Pi-mega frame.
func TestLayout(t *testing.T) {
	f := frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	units, rs, is, rp, ip := Layout(f)
	if units != 1536*1536/8 || rs != 7077888/1024 || is != 1536*1536*4/1024 || rp != 108 || ip != 144 {
		t.Errorf("Layout = %d %d %d %d %d", units, rs, is, rp, ip)
	}
	if LastSub(1024) != 1024 || LastSub(1025) != 1 || LastSub(7) != 7 {
		t.Errorf("LastSub(1024, 1025, 7) = %d, %d, %d", LastSub(1024), LastSub(1025), LastSub(7))
	}
}
