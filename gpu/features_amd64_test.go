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

// asmFunc is one assembly function: its name and its instructions, the
// macros it uses expanded, each with where it is written.
type asmFunc struct {
	name string
	ins  []asmInstruction
}

type asmInstruction struct{ text, at string }

// readAssembly returns the functions of the package's amd64 assembly.
func readAssembly(t *testing.T) []asmFunc {
	t.Helper()
	files, err := filepath.Glob("*_amd64.s")
	if err != nil || len(files) == 0 {
		t.Fatalf("no assembly files: %v", err)
	}
	type macro struct {
		params []string
		body   []asmInstruction
	}
	macros := map[string]*macro{}
	var funcs []asmFunc
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var def *macro // the macro being defined, while its lines go on
		for n, line := range strings.Split(string(src), "\n") {
			line, _, _ = strings.Cut(line, "//")
			line = strings.TrimSpace(line)
			more := strings.HasSuffix(line, "\\")
			line = strings.TrimSpace(strings.TrimSuffix(line, "\\"))
			if rest, ok := strings.CutPrefix(line, "#define "); ok {
				head, _, _ := strings.Cut(rest, " ")
				mname, params, _ := strings.Cut(head, "(")
				def = &macro{}
				for _, p := range strings.Split(strings.TrimSuffix(params, ")"), ",") {
					if p = strings.TrimSpace(p); p != "" {
						def.params = append(def.params, p)
					}
				}
				macros[mname] = def
				line = ""
			} else if fname, ok := strings.CutPrefix(line, "TEXT ·"); ok {
				fname, _, _ = strings.Cut(fname, "(")
				funcs = append(funcs, asmFunc{name: fname})
				continue
			}
			for _, ins := range strings.Split(line, ";") {
				if ins = strings.TrimSpace(ins); ins == "" {
					continue
				}
				i := asmInstruction{ins, fmt.Sprintf("%s:%d", name, n+1)}
				switch {
				case def != nil:
					def.body = append(def.body, i)
				case len(funcs) > 0:
					f := &funcs[len(funcs)-1]
					f.ins = append(f.ins, i)
				}
			}
			if !more {
				def = nil
			}
		}
	}
	// Expand the macros' uses, with their arguments.
	var expand func(i asmInstruction, depth int) []asmInstruction
	expand = func(i asmInstruction, depth int) []asmInstruction {
		op, _, _ := strings.Cut(i.text, " ")
		mname, args, call := strings.Cut(op, "(")
		if call {
			_, args, _ = strings.Cut(i.text, "(")
			args = strings.TrimSuffix(strings.TrimSpace(args), ")")
		}
		m, ok := macros[mname]
		if !ok || depth > 8 {
			return []asmInstruction{i}
		}
		var values []string
		for _, a := range strings.Split(args, ",") {
			values = append(values, strings.TrimSpace(a))
		}
		var out []asmInstruction
		for _, b := range m.body {
			text := b.text
			for k, p := range m.params {
				if k < len(values) {
					text = regexp.MustCompile(`\b`+p+`\b`).ReplaceAllString(text, values[k])
				}
			}
			out = append(out, expand(asmInstruction{text, b.at + " (in " + i.at + ")"}, depth+1)...)
		}
		return out
	}
	for k := range funcs {
		var all []asmInstruction
		for _, i := range funcs[k].ins {
			all = append(all, expand(i, 0)...)
		}
		funcs[k].ins = all
	}
	return funcs
}

// TestAVX512NeedsCoverAssembly reads every instruction of the package's
// assembly functions, their macros expanded, and checks that the features
// useGFNI asks the CPU for (avx512Needs) include each extension the EVEX
// instructions need: AVX512F, the one evexExtension names, and AVX512VL
// for a 128- or 256-bit EVEX form (an EVEX instruction with no 512-bit
// operand, but for VINSERTI64X4 and VEXTRACTI64X4, which have only
// 512-bit forms). A CPU or virtual machine without one of them must get
// the AVX2 decodes, not an illegal instruction; and those, the functions
// named ...AVX2, must hold no EVEX instruction at all.
func TestAVX512NeedsCoverAssembly(t *testing.T) {
	wideReg := regexp.MustCompile(`\b(Z\d+|K[0-7])\b`)
	highReg := regexp.MustCompile(`\b[XY](1[6-9]|2\d|3[01])\b`)
	vecReg := regexp.MustCompile(`\b[XY]\d+\b`)
	needed := map[string]string{} // extension: an instruction that needs it
	funcs := readAssembly(t)
	for _, f := range funcs {
		for _, i := range f.ins {
			op, args, _ := strings.Cut(i.text, " ")
			op, _, _ = strings.Cut(op, ".") // VMOVDQU8.Z
			e, known := evexExtension[op]
			wide := wideReg.MatchString(args)
			if !wide && !highReg.MatchString(args) && !e.only {
				continue // a VEX or scalar instruction
			}
			at := fmt.Sprintf("%s: %s: %s", i.at, f.name, i.text)
			switch {
			case strings.HasSuffix(f.name, "AVX2"):
				t.Errorf("%s: an EVEX instruction in a function for AVX2 CPUs", at)
				continue
			case !known:
				t.Errorf("%s: an EVEX instruction this test does not know: add it to evexExtension", at)
				continue
			}
			need := []string{"AVX512F", e.ext}
			if !wide && vecReg.MatchString(args) && !strings.HasSuffix(op, "64X4") {
				need = append(need, "AVX512VL")
			}
			for _, ext := range need {
				if _, seen := needed[ext]; ext != "" && !seen {
					needed[ext] = at
				}
			}
		}
	}
	if len(funcs) < 10 || needed["GFNI"] == "" || needed["AVX512VBMI"] == "" {
		t.Fatalf("%d functions, extensions %v: the assembly was not read as it is written", len(funcs), needed)
	}
	for ext, at := range needed {
		if _, ok := avx512Needs[ext]; !ok {
			t.Errorf("%s needs %s, which useGFNI does not ask the CPU for", at, ext)
		}
	}
}
