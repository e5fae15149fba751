// Command apilist lists h5ingest's facility API, one line for each
// exported name with its signature, as Go's own api/go1.*.txt list the
// standard library's:
//
//	pkg h5ingest/registry, func New() *Registry
//	pkg h5ingest/registry, type Codec struct, Filter int
//	pkg h5ingest/registry, method (*Registry) AddCodec(Codec) error
//
// The packages and names listed are the declared ones (declared.go,
// docs/extending.md). api/facility.txt holds the listing of the tree it
// is committed with, and the package's test fails when the API differs
// from it. Run from the repository's root:
//
//	go run ./tools/apilist       # print the listing
//	go run ./tools/apilist -w    # write api/facility.txt (make api)
//
// With -w it first checks that CHANGELOG.md's newest section names each
// name whose line changed, and writes nothing where one is not named.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Where the listing and the changelog are, from the repository's root.
const (
	listingFile   = "api/facility.txt"
	changelogFile = "CHANGELOG.md"
)

// regenerate is how to write a new listing, for messages.
const regenerate = "name each changed name in " + changelogFile + "'s newest section, with a porting note where a facility must change, then run make api (go run ./tools/apilist -w) to write " + listingFile

func main() {
	write := flag.Bool("w", false, "write "+listingFile+" rather than print the listing")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := run(*root, *write, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "apilist: %v\n", err)
		os.Exit(1)
	}
}

// run prints the listing of the tree at root to out, or with write checks
// the changelog and writes it to the listing file.
func run(root string, write bool, out io.Writer) error {
	lines, err := List(root, declared)
	if err != nil {
		return err
	}
	if !write {
		_, err := io.WriteString(out, strings.Join(lines, "\n")+"\n")
		return err
	}
	switch old, err := ReadListing(filepath.Join(root, listingFile)); {
	case errors.Is(err, os.ErrNotExist): // the first listing
	case err != nil:
		return err
	default:
		changelog, err := os.ReadFile(filepath.Join(root, changelogFile))
		if err != nil {
			return err
		}
		added, removed := Diff(old, lines)
		if missing := Unmentioned(string(changelog), append(added, removed...)); len(missing) > 0 {
			return fmt.Errorf("%s does not name %s in its newest section; %s", changelogFile, strings.Join(missing, ", "), regenerate)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(listingFile)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, listingFile), []byte(header+strings.Join(lines, "\n")+"\n"), 0o644)
}

// header opens the listing file.
const header = `# h5ingest's facility API: each exported name a facility may rely on,
# with its signature (docs/extending.md, "The facility API").
# Written by make api (go run ./tools/apilist -w); do not edit.
`

// ReadListing returns the lines of the listing file at path, comments
// left out.
func ReadListing(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// Diff returns the lines of now not in old, and of old not in now.
func Diff(old, now []string) (added, removed []string) {
	for _, l := range now {
		if !slices.Contains(old, l) {
			added = append(added, l)
		}
	}
	for _, l := range old {
		if !slices.Contains(now, l) {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// Unmentioned returns, once each, the names of lines that the newest
// section of changelog (from its first "## " heading to the next) does
// not mention: of a field or method, Type.Member (registry.Codec's Read:
// Codec.Read); of any other line, package.Name (registry.Start).
func Unmentioned(changelog string, lines []string) []string {
	section := newestSection(changelog)
	var missing []string
	for _, l := range lines {
		pkgName, name, member := Name(l)
		mention, ok := pkgName+"."+name, mentions(section, pkgName+"."+name, false)
		if member != "" {
			mention, ok = name+"."+member, mentions(section, name+"."+member, true)
		}
		if !ok && !slices.Contains(missing, mention) {
			missing = append(missing, mention)
		}
	}
	return missing
}

// newestSection returns the text of changelog from its first "## "
// heading to the next.
func newestSection(changelog string) string {
	_, rest, ok := strings.Cut(changelog, "\n## ")
	if !ok {
		return ""
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// mentions reports whether text holds name as a whole name: not as the
// start of a longer one (registry.Codec in registry.CodecInfo), nor as the
// end of one, which afterDot allows to end in "." (Codec.Read in
// registry.Codec.Read).
func mentions(text, name string, afterDot bool) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		at, end := i+j, i+j+len(name)
		before := at == 0 || !isIdent(text[at-1]) && (afterDot || text[at-1] != '.')
		if before && (end == len(text) || !isIdent(text[end])) {
			return true
		}
		i = end
	}
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Name returns the package's name, the top-level name and the member
// (field or method; "" for none) that a listing line is about:
// "registry", "Codec", "Read" for "pkg h5ingest/registry, type Codec
// struct, Read func(...)".
func Name(line string) (pkgName, name, member string) {
	path, rest, _ := strings.Cut(strings.TrimPrefix(line, "pkg "), ", ")
	pkgName = path[strings.LastIndex(path, "/")+1:]
	kind, rest, _ := strings.Cut(rest, " ")
	switch kind {
	case "method": // method (*T) M(...)
		recv, m, _ := strings.Cut(rest, ") ")
		name = strings.TrimLeft(recv, "(*")
		name, _, _ = strings.Cut(name, "[")
		member = identAt(m)
	case "type": // type T struct, F int; type T interface, M() error
		name = identAt(rest)
		for _, kind := range []string{" struct, ", " interface, "} {
			if _, m, ok := strings.Cut(rest, kind); ok {
				if m != "unexported methods" {
					member = identAt(strings.TrimPrefix(m, "embedded "))
				}
				break
			}
		}
	default: // func, const, var
		name = identAt(rest)
	}
	return pkgName, name, member
}

// identAt returns the identifier s starts with.
func identAt(s string) string {
	for i := range len(s) {
		if !isIdent(s[i]) {
			return s[:i]
		}
	}
	return s
}

// List returns the listing of the packages decl of the module at root,
// sorted, from the export data the go command builds.
func List(root string, decl []pkg) ([]string, error) {
	paths := make([]string, len(decl))
	for i, p := range decl {
		paths[i] = p.Path
	}
	exports, err := exportData(root, paths)
	if err != nil {
		return nil, err
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var lines []string
	for _, p := range decl {
		tp, err := imp.Import(p.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Path, err)
		}
		l, err := listPackage(tp, p.Names)
		if err != nil {
			return nil, err
		}
		lines = append(lines, l...)
	}
	slices.Sort(lines)
	return lines, nil
}

// exportData returns the export data file of each package that paths
// need, by import path, as go list -export builds them in root.
func exportData(root string, paths []string) (map[string]string, error) {
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, paths...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	exports := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return exports, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list -export: %w", err)
		}
		exports[p.ImportPath] = p.Export
	}
}

// listPackage returns the lines of the names of p (every exported one
// where names is nil).
func listPackage(p *types.Package, names []string) ([]string, error) {
	scope := p.Scope()
	if names == nil {
		for _, n := range scope.Names() {
			if token.IsExported(n) {
				names = append(names, n)
			}
		}
	}
	l := lister{pkg: p, prefix: "pkg " + p.Path() + ", "}
	for _, n := range names {
		obj := scope.Lookup(n)
		if obj == nil || !obj.Exported() {
			return nil, fmt.Errorf("%s declares %s, which it does not export", p.Path(), n)
		}
		l.object(obj)
	}
	return l.lines, nil
}

// lister writes the lines of one package.
type lister struct {
	pkg    *types.Package
	prefix string
	lines  []string
}

func (l *lister) add(format string, args ...any) {
	l.lines = append(l.lines, l.prefix+fmt.Sprintf(format, args...))
}

// object adds the lines of a package-level object: one, and for a type
// one more for each exported field or method.
func (l *lister) object(obj types.Object) {
	switch o := obj.(type) {
	case *types.Const:
		l.add("const %s %s = %s", o.Name(), l.typ(o.Type()), o.Val().ExactString())
	case *types.Var:
		l.add("var %s %s", o.Name(), l.typ(o.Type()))
	case *types.Func:
		sig := o.Type().(*types.Signature)
		l.add("func %s%s%s", o.Name(), l.typeParams(sig.TypeParams()), l.signature(sig))
	case *types.TypeName:
		l.typeName(o)
	}
}

// typeName adds the lines of a named type: the type, its exported fields
// or interface methods, and its exported methods.
func (l *lister) typeName(o *types.TypeName) {
	if o.IsAlias() {
		l.add("type %s = %s", o.Name(), l.typ(types.Unalias(o.Type())))
		return
	}
	named := o.Type().(*types.Named)
	decl := o.Name() + l.typeParams(named.TypeParams())
	switch u := named.Underlying().(type) {
	case *types.Struct:
		l.add("type %s struct", decl)
		for f := range u.Fields() {
			switch {
			case !f.Exported():
			case f.Embedded():
				l.add("type %s struct, embedded %s", o.Name(), l.typ(f.Type()))
			default:
				l.add("type %s struct, %s %s", o.Name(), f.Name(), l.typ(f.Type()))
			}
		}
	case *types.Interface:
		l.add("type %s interface", decl)
		unexported := false
		for m := range u.Methods() {
			if !m.Exported() {
				unexported = true
				continue
			}
			l.add("type %s interface, %s%s", o.Name(), m.Name(), l.signature(m.Type().(*types.Signature)))
		}
		if unexported {
			l.add("type %s interface, unexported methods", o.Name())
		}
	default:
		l.add("type %s %s", decl, l.typ(u))
	}
	for m := range named.Methods() {
		if !m.Exported() {
			continue
		}
		sig := m.Type().(*types.Signature)
		recv := o.Name()
		if _, ok := sig.Recv().Type().(*types.Pointer); ok {
			recv = "*" + recv
		}
		l.add("method (%s) %s%s", recv, m.Name(), l.signature(sig))
	}
}

// qualify names a type of another package by its package's name.
func (l *lister) qualify(p *types.Package) string {
	if p == l.pkg {
		return ""
	}
	return p.Name()
}

// typ returns t as Go writes it, with the parameters of func types
// unnamed, so that renaming one is no change of the API.
func (l *lister) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Signature:
		return "func" + l.signature(t)
	case *types.Pointer:
		return "*" + l.typ(t.Elem())
	case *types.Slice:
		return "[]" + l.typ(t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), l.typ(t.Elem()))
	case *types.Map:
		return "map[" + l.typ(t.Key()) + "]" + l.typ(t.Elem())
	}
	return types.TypeString(t, l.qualify)
}

// signature returns a function's parameters and results, without
// names: (int, ...string) (T, error).
func (l *lister) signature(sig *types.Signature) string {
	params := make([]string, sig.Params().Len())
	for i := range params {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == len(params)-1 {
			params[i] = "..." + l.typ(t.(*types.Slice).Elem())
		} else {
			params[i] = l.typ(t)
		}
	}
	s := "(" + strings.Join(params, ", ") + ")"
	switch n := sig.Results().Len(); n {
	case 0:
	case 1:
		s += " " + l.typ(sig.Results().At(0).Type())
	default:
		results := make([]string, n)
		for i := range results {
			results[i] = l.typ(sig.Results().At(i).Type())
		}
		s += " (" + strings.Join(results, ", ") + ")"
	}
	return s
}

// typeParams returns type parameters as a declaration writes them:
// [O any]; "" for none.
func (l *lister) typeParams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	parts := make([]string, tps.Len())
	for i := range parts {
		tp := tps.At(i)
		parts[i] = tp.Obj().Name() + " " + l.typ(tp.Constraint())
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
