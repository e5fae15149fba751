// Package imports holds the test that keeps h5ingest's import graph going
// one way: frame at the bottom, the command at the top.
package imports

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path"
	"strings"
	"testing"
)

// layers are h5ingest's packages from the bottom up; a package may import
// packages of lower layers only (and its own internal packages). A package
// not listed fails the test: a new package takes its place here.
var layers = [][]string{
	{"frame", "version", "logagg", "plan", "tools/doctest"},
	{"compress/bitshuffle", "gpu/kernels"},
	{"compress", "gpu/internal/hostgrid", "gpu/internal/fakecuda", "gpu/cuda", "source/fabric/internal/fi"},
	{"gpu", "config"},
	{"gpu/gputest"},
	{"pipeline", "compress/compresstest"},
	{"source/capture", "pipeline/pipelinetest", "processor/flatfield"},
	{"source/sim", "source/fabric", "writer"},
	{"writer/writertest"},
	{"instrument", "preview", "stream", "registry", "bench"},
	{"stock", "status", "service"},
	{"scan"},
	{"cli"},
	{"examples/extend", "cmd/h5ingest", "tools/gpu", "deploy"},
}

// TestImportDirection checks, from go list, that no package imports its
// parent, a sibling of its layer or a package above it.
func TestImportDirection(t *testing.T) {
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer["h5ingest/"+p] = i
		}
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "h5ingest/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
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
}

// conformance reports whether pkg is a conformance suite of its parent's
// interfaces (compress/compresstest, writer/writertest ...), which
// imports its parent as net/http/httptest imports net/http.
func conformance(pkg string) bool {
	return strings.HasSuffix(pkg, "test") && path.Base(pkg) == path.Base(path.Dir(pkg))+"test"
}
