package scan

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoPrinting fails where a non-test file of package scan, or of a
// package under it, prints: a call of fmt.Print*, fmt.Fprint* or the
// builtins print and println, or a use of os.Stdout or os.Stderr. The
// library returns its results and notes (Result, Note, Options.Notify);
// the command (package cli) and the service say them.
func TestNoPrinting(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, where := range printing(fset, f) {
			t.Errorf("%s: the library prints; return it (a Note, a Result) for the command to say", where)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// printing returns the places in f that print, as "file:line: what".
func printing(fset *token.FileSet, f *ast.File) []string {
	names := map[string]string{} // the file's name of fmt and of os
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if path != "fmt" && path != "os" {
			continue
		}
		name := path
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = path
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		var what string
		switch n := n.(type) {
		case *ast.SelectorExpr:
			x, ok := n.X.(*ast.Ident)
			if !ok {
				break
			}
			switch sel := n.Sel.Name; names[x.Name] {
			case "fmt":
				if strings.HasPrefix(sel, "Print") || strings.HasPrefix(sel, "Fprint") {
					what = "fmt." + sel
				}
			case "os":
				if sel == "Stdout" || sel == "Stderr" {
					what = "os." + sel
				}
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && id.Obj == nil && (id.Name == "print" || id.Name == "println") {
				what = id.Name
			}
		}
		if what != "" {
			found = append(found, fset.Position(n.Pos()).String()+": "+what)
		}
		return true
	})
	return found
}

// TestPrintingFound checks that printing finds each way of printing, and
// nothing else.
func TestPrintingFound(t *testing.T) {
	const src = `package p

import (
	"fmt"
	stdos "os"
)

func f(w interface{ Write([]byte) (int, error) }) error {
	fmt.Println("a")
	fmt.Fprintf(w, "b")
	_ = stdos.Stderr
	println("c")
	_ = fmt.Sprintf("fine")
	return fmt.Errorf("fine")
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := printing(fset, f)
	want := []string{"p.go:9:2: fmt.Println", "p.go:10:2: fmt.Fprintf", "p.go:11:6: os.Stderr", "p.go:12:2: println"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
