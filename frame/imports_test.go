package frame

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsNothingOfOurs keeps the frame format at the bottom of the
// import graph: every other package may import it, and it imports none of
// them.
func TestImportsNothingOfOurs(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(p, "h5ingest/") {
				t.Errorf("%s imports %s: the frame format imports nothing of ours", name, p)
			}
		}
	}
}
