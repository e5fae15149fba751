// Package imports holds the test that keeps h5ingest's import graph going
// one way: frame at the bottom, the command at the top.
package imports

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// layers are h5ingest's packages from the bottom up; a package may import
// packages of lower layers only (and its own internal packages). A package
// not listed fails the test: a new package takes its place here.
var layers = [][]string{
	{"frame", "version", "logagg", "plan", "tools/doctest", "tools/apilist"},
	{"compress/bitshuffle", "gpu/kernels", "compress/internal/clz4"},
	{"compress", "gpu/internal/hostgrid", "gpu/internal/fakecuda", "gpu/cuda", "source/fabric/internal/fi", "source/roce/internal/verbs"},
	{"gpu", "config"},
	{"gpu/gputest"},
	{"pipeline", "compress/compresstest"},
	{"receive", "source/capture", "pipeline/pipelinetest", "processor/flatfield"},
	{"source/sim", "source/fabric", "source/roce", "writer"},
	{"writer/writertest"},
	{"instrument", "preview", "stream", "registry", "bench"},
	{"stock", "status", "service"},
	{"scan"},
	{"serve"},
	{"scan/scantest"},
	{"cli"},
	{"cmd/h5ingest", "tools/gpu", "deploy"},
}

// TestImportDirection checks, from go list, that no package of h5ingest
// imports its parent, a sibling of its layer or a package above it, and
// that the packages of the modules nested in this repository (a
// facility's own, as examples/extend is) sit above every layer: they may
// import any of h5ingest's packages, and none of h5ingest's imports them.
// A nested module's packages need no place in layers.
func TestImportDirection(t *testing.T) {
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer["h5ingest/"+p] = i
		}
	}
	root := filepath.Join("..", "..")
	outside := map[string]bool{}
	var theirs []listed
	for _, dir := range nestedModules(t, root) {
		for _, p := range goList(t, dir, "./...") {
			outside[p.ImportPath] = true
			theirs = append(theirs, p)
		}
	}
	if len(theirs) == 0 {
		t.Error("go list found no package of a nested module: examples/extend is one")
	}
	checked := 0
	for _, p := range goList(t, root, "h5ingest/...") {
		if p.ImportPath == "h5ingest/tools/imports" {
			continue
		}
		at, ok := layer[p.ImportPath]
		if !ok {
			t.Errorf("%s is in no layer: give it its place in layers", p.ImportPath)
			continue
		}
		checked++
		for _, imp := range p.Imports {
			if outside[imp] {
				t.Errorf("%s imports %s, a package of another module: h5ingest imports no facility's code", p.ImportPath, imp)
				continue
			}
			if !strings.HasPrefix(imp, "h5ingest/") {
				continue
			}
			if strings.HasPrefix(imp, p.ImportPath+"/internal/") {
				continue
			}
			to, ok := layer[imp]
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is in no layer", p.ImportPath, imp)
			case imp == path.Dir(p.ImportPath) && !conformance(p.ImportPath):
				t.Errorf("%s imports its parent %s", p.ImportPath, imp)
			case to >= at:
				t.Errorf("%s (layer %d) imports %s (layer %d): imports go down only", p.ImportPath, at, imp, to)
			}
		}
	}
	if checked < len(layer)-2 {
		t.Errorf("go list showed %d of the %d packages", checked, len(layer))
	}
	for _, p := range theirs {
		for _, imp := range p.Imports {
			if _, ok := layer[imp]; strings.HasPrefix(imp, "h5ingest/") && !ok {
				t.Errorf("%s (another module) imports %s, which is in no layer", p.ImportPath, imp)
			}
		}
	}
}

// listed is a package as go list describes it.
type listed struct {
	ImportPath string
	Imports    []string
}

// goList returns the packages that go list, run in dir, finds for
// pattern.
func goList(t *testing.T, dir, pattern string) []listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", pattern)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list %s in %s: %v\n%s", pattern, dir, err, exit.Stderr)
		}
		t.Fatalf("go list %s in %s: %v", pattern, dir, err)
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
}

// nestedModules returns the directories under root, other than root,
// that hold a go.mod: modules of their own, which go list and go test
// ./... in root leave out.
func nestedModules(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata"):
			return filepath.SkipDir
		case !d.IsDir() && d.Name() == "go.mod" && filepath.Dir(p) != root:
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// conformance reports whether pkg is a conformance suite of its parent's
// interfaces (compress/compresstest, writer/writertest ...), which
// imports its parent as net/http/httptest imports net/http.
func conformance(pkg string) bool {
	return strings.HasSuffix(pkg, "test") && path.Base(pkg) == path.Base(path.Dir(pkg))+"test"
}
