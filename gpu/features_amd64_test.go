package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// evexExtension gives, for each instruction the AVX-512 decodes use, the
// extension its EVEX form needs beside AVX512F ("" for AVX512F alone), and
// whether it has only an EVEX form (a VEX one runs on AVX2 CPUs).
var evexExtension = map[string]struct {
	ext  string
	only bool
}{
	"VMOVDQU64": {"", true}, "VMOVDQU32": {"", true}, "VINSERTI32X4": {"", true},
	"VINSERTI64X4": {"", true}, "VEXTRACTI64X4": {"", true}, "VPTERNLOGD": {"", true},
	"VPTERNLOGQ": {"", true}, "VPXORD": {"", true}, "VPXORQ": {"", true},
	"VPANDD": {"", true}, "VPORD": {"", true}, "VPORQ": {"", true},
	"VPMOVDW": {"", true}, "VPTESTMD": {"", true}, "VPTESTMQ": {"", true},
	"KXNORW": {"", true}, "KORTESTW": {"", true},
	"VPBROADCASTQ": {"", false}, "VPBROADCASTD": {"", false}, "VPSRLD": {"", false},
	"VPSLLD": {"", false}, "VPGATHERDD": {"", false}, "VPMOVZXWD": {"", false},
	"VMOVDQU8": {"AVX512BW", true}, "VMOVDQU16": {"AVX512BW", true},
	"VPTESTMB": {"AVX512BW", true}, "KSHIFTRQ": {"AVX512BW", true}, "KMOVQ": {"AVX512BW", true},
	"VPSHUFB": {"AVX512BW", false}, "VPMOVZXBW": {"AVX512BW", false},
	"VPMULLW": {"AVX512BW", false}, "VPSRLW": {"AVX512BW", false},
	"VPSLLW": {"AVX512BW", false}, "VPADDB": {"AVX512BW", false},
	"VPSUBB": {"AVX512BW", false}, "VPCMPEQB": {"AVX512BW", false},
	"KORTESTB":       {"AVX512DQ", true},
	"VPERMB":         {"AVX512VBMI", true},
	"VPERMI2B":       {"AVX512VBMI", true},
	"VGF2P8AFFINEQB": {"GFNI", false},
}

// TestAVX512NeedsCoverAssembly reads every instruction of the package's
// assembly and checks that the features useGFNI asks the CPU for
// (avx512Needs) include each extension its EVEX instructions need:
// AVX512F, the one evexExtension names, and AVX512VL for a 128- or
// 256-bit EVEX form (an EVEX instruction with no 512-bit operand, but for
// VINSERTI64X4 and VEXTRACTI64X4, which have only 512-bit forms). A CPU
// or virtual machine without one of them must get the AVX2 decodes, not
// an illegal instruction.
func TestAVX512NeedsCoverAssembly(t *testing.T) {
	files, err := filepath.Glob("*_amd64.s")
	if err != nil || len(files) == 0 {
		t.Fatalf("no assembly files: %v", err)
	}
	wideReg := regexp.MustCompile(`\b(Z\d+|K[0-7])\b`)
	highReg := regexp.MustCompile(`\b[XY](1[6-9]|2\d|3[01])\b`)
	vecReg := regexp.MustCompile(`\b[XY]\d+\b`)
	needed := map[string]string{} // extension: an instruction that needs it
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(src), "\n") {
			line, _, _ = strings.Cut(line, "//")
			line = strings.TrimSuffix(strings.TrimSpace(line), "\\")
			for _, ins := range strings.Split(line, ";") {
				op, args, _ := strings.Cut(strings.TrimSpace(ins), " ")
				op, _, _ = strings.Cut(op, ".") // VMOVDQU8.Z
				e, known := evexExtension[op]
				wide := wideReg.MatchString(args)
				if !wide && !highReg.MatchString(args) && !e.only {
					continue // a VEX or scalar instruction, a directive, a macro's use
				}
				at := fmt.Sprintf("%s:%d: %s", name, n+1, strings.TrimSpace(ins))
				if strings.Contains(op, "(") || op == "#define" {
					continue
				}
				if !known {
					t.Errorf("%s: an EVEX instruction this test does not know: add it to evexExtension", at)
					continue
				}
				need := []string{"AVX512F", e.ext}
				if !wide && vecReg.MatchString(args) && !strings.HasSuffix(op, "64X4") { // only 512-bit forms
					need = append(need, "AVX512VL")
				}
				for _, ext := range need {
					if _, seen := needed[ext]; ext != "" && !seen {
						needed[ext] = at
					}
				}
			}
		}
	}
	if len(needed) == 0 {
		t.Fatal("no EVEX instruction found: the assembly was not read")
	}
	for ext, at := range needed {
		if _, ok := avx512Needs[ext]; !ok {
			t.Errorf("%s needs %s, which useGFNI does not ask the CPU for", at, ext)
		}
	}
}
