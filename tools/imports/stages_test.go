package imports

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// stageNames are the names of h5ingest's own stages, each with the
// package that implements it: a profile chooses them, and only that
// package, stock (which registers them) and the built-in profiles may
// spell them. Elsewhere a stage is found through its registry entry,
// which carries what the program asks about it.
var stageNames = map[string]string{
	"bslz4": "compress", "bszstd": "compress", "lz4": "compress", "deflate": "compress", "none": "compress",
	"cpu": "gpu", "cuda": "gpu", "auto": "gpu",
	"nxtomo": "writer", "cxi": "writer",
	"fabric": "source/fabric", "capture": "source/capture", "roce": "source/roce",
}

// stageNameUses are the other places a built-in stage's name may be
// spelt, by file and function ("" for the file's top level), with why.
var stageNameUses = map[string]string{
	"config/schema.go:Default":                "the built-in default profile",
	"source/fabric/api.go:CheckProvider":      `"none", no provider found, not a codec`,
	"stream/message.go:imageHead":             "Stream V2's own names of its compressions, as DECTRIS defines them",
	"stream/stream.go:Open":                   "Stream V2's own names of its compressions, which a codec's entry gives (registry.Codec.Stream)",
	"bench/bench.go:Run":                      "the bench's fixed rows: uncompressed and bslz4, as its report names them",
	"bench/bench.go:benchSteps":               "the bench's fixed rows",
	"bench/bench.go:WriteChunks":              "the bench's fixed rows",
	"bench/bench.go:roceRound":                "the bench's fixed row of the roce receiver against its emulator, bslz4 as every replay row",
	"scan/stages.go:DefaultComputeCache":      "the CUDA compute cache's directory name, not the backend",
	"writer/writertest/writertest.go:write":   "the layout suite writes its chunks with one of h5ingest's codecs",
	"source/fabric/internal/fi/providers.go:": `"cxi", libfabric's HPE Slingshot provider, not a layout`,
	"cli/cmd_send.go:send":                    "send's --transport chooses the sender it plays: libfabric's, or a front end's static queue pair; the registry's sources receive",
	"cli/cmd_send.go:newSendCmd":              "the default of send's --transport",
	"source/roce/roce.go:":                    `"none", the value of source.frame_header for a front end that sends no frame header, not a codec`,
	"serve/gpu_lost.go:":                      `"cpu", a value of serve's --on-gpu-lost (go on, decoding on the CPU), not a backend's name: the backend taken is the registry's reference`,
}

// TestStageNamesStayHome checks that no non-test Go file of h5ingest
// spells a built-in stage's name as a string outside the places allowed:
// its own package (and the packages under it), stock, and stageNameUses.
// A module nested in the repository (a facility's own, as
// examples/extend is) is not h5ingest's: its stages, and its presets of
// h5ingest's stages, are its own business.
func TestStageNamesStayHome(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || isModule(p)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := path.Dir(rel)
		for _, fn := range literalsByFunc(f) {
			for _, lit := range fn.lits {
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					continue
				}
				home, ok := stageNames[s]
				if !ok || dir == "stock" || dir == home || strings.HasPrefix(dir, home+"/") {
					continue
				}
				where := rel + ":" + fn.name
				if _, ok := stageNameUses[where]; ok {
					seen[where] = true
					continue
				}
				t.Errorf("%s: %q, the name of a %s stage, in %s: ask its registry entry instead (or list the place in stageNameUses, saying why)",
					fset.Position(lit.Pos()), s, home, where)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for where, why := range stageNameUses {
		if !seen[where] {
			t.Errorf("stageNameUses lists %s (%s), which spells no stage name now: take it off", where, why)
		}
	}
}

// isModule reports whether dir holds a go.mod: a module of its own.
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// funcLits are the string literals of one function, or of a file's top
// level (name "").
type funcLits struct {
	name string
	lits []*ast.BasicLit
}

// literalsByFunc returns f's string literals grouped by the function
// declaring them (methods by their name alone).
func literalsByFunc(f *ast.File) []funcLits {
	var out []funcLits
	top := funcLits{}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok {
			top.lits = append(top.lits, stringLits(decl)...)
			continue
		}
		out = append(out, funcLits{fd.Name.Name, stringLits(fd)})
	}
	return append(out, top)
}

// stringLits returns the string literals under n.
func stringLits(n ast.Node) []*ast.BasicLit {
	var lits []*ast.BasicLit
	ast.Inspect(n, func(n ast.Node) bool {
		if l, ok := n.(*ast.BasicLit); ok && l.Kind == token.STRING {
			lits = append(lits, l)
		}
		return true
	})
	return lits
}
