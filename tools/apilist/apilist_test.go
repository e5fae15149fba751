package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

// TestFacilityAPI fails when h5ingest's facility API differs from the
// listing committed in api/facility.txt: a name of a declared package
// added, removed or given another signature. The failure lists the lines
// that changed, the names CHANGELOG.md's newest section does not name
// yet, and how to write the listing anew.
func TestFacilityAPI(t *testing.T) {
	lines, err := List(root, declared)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := ReadListing(filepath.Join(root, listingFile))
	if err != nil {
		t.Fatalf("%v: %s", err, regenerate)
	}
	added, removed := Diff(listed, lines)
	if len(added)+len(removed) == 0 {
		return
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "the facility API differs from %s:\n", listingFile)
	for _, l := range removed {
		fmt.Fprintf(&msg, "  - %s\n", l)
	}
	for _, l := range added {
		fmt.Fprintf(&msg, "  + %s\n", l)
	}
	changelog, err := os.ReadFile(filepath.Join(root, changelogFile))
	if err != nil {
		t.Fatal(err)
	}
	if missing := Unmentioned(string(changelog), append(added, removed...)); len(missing) > 0 {
		fmt.Fprintf(&msg, "%s's newest section does not name %s.\n", changelogFile, strings.Join(missing, ", "))
	}
	msg.WriteString("To change the facility API: " + regenerate + ".")
	t.Error(msg.String())
}

// TestListingCatchesAChange lists a scratch module's package, renames a
// name in it and changes a signature, and checks that the listing shows
// both, that the changelog check names what its newest section does not
// mention, and that -w refuses to write the listing until it does.
func TestListingCatchesAChange(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module h5ingest\n\ngo 1.26\n")
	write("registry/registry.go", `package registry

// Codec is an entry.
type Codec struct {
	Name string
	Read func(filters []int, elemSize int) (any, error)
	doc  string
}

// Registry is a set of entries.
type Registry struct{}

// CodecOf returns a codec's name.
func (r *Registry) CodecOf(filters []int) string { return "" }
`)
	decl := []pkg{{Path: "h5ingest/registry"}}
	before, err := List(dir, decl)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg h5ingest/registry, method (*Registry) CodecOf([]int) string",
		"pkg h5ingest/registry, type Codec struct",
		"pkg h5ingest/registry, type Codec struct, Name string",
		"pkg h5ingest/registry, type Codec struct, Read func([]int, int) (any, error)",
		"pkg h5ingest/registry, type Registry struct",
	}
	if !slices.Equal(before, want) {
		t.Fatalf("listing:\n%s\nwant:\n%s", strings.Join(before, "\n"), strings.Join(want, "\n"))
	}
	// Parameter names are no part of the API; a name and a signature are.
	write("registry/registry.go", `package registry

// Codec is an entry.
type Codec struct {
	Name string
	Read func(f []int, size int) (any, error)
	Doc  string
}

// Registry is a set of entries.
type Registry struct{}

// CodecName returns a codec's name.
func (r *Registry) CodecName(f []int) string { return "" }
`)
	after, err := List(dir, decl)
	if err != nil {
		t.Fatal(err)
	}
	added, removed := Diff(before, after)
	if !slices.Equal(added, []string{
		"pkg h5ingest/registry, method (*Registry) CodecName([]int) string",
		"pkg h5ingest/registry, type Codec struct, Doc string",
	}) || !slices.Equal(removed, []string{"pkg h5ingest/registry, method (*Registry) CodecOf([]int) string"}) {
		t.Fatalf("added %q, removed %q", added, removed)
	}
	changed := append(added, removed...)
	for _, c := range []struct {
		changelog string
		missing   []string
	}{
		{"# Changes\n\n## Unreleased\n\nNothing yet.\n", []string{"Registry.CodecName", "Codec.Doc", "Registry.CodecOf"}},
		{"# Changes\n\n## Unreleased\n\n- `Registry.CodecName` replaces `Registry.CodecOf`.\n", []string{"Codec.Doc"}},
		{"# Changes\n\n## Unreleased\n\n- `registry.Registry.CodecName` replaces CodecOf (Registry.CodecOf). `registry.Codec.Doc` is new.\n", nil},
		// A mention of the type, of another member or of a longer name
		// is not one of the member.
		{"# Changes\n\n## Unreleased\n\n- `registry.Registry`, `registry.Codec`, `Registry.CodecNames`, `Codec.Docs`, `Registry.CodecOfs`.\n", []string{"Registry.CodecName", "Codec.Doc", "Registry.CodecOf"}},
		// An older section's mention is not this change's.
		{"# Changes\n\n## Unreleased\n\n- `Codec.Doc`.\n\n## v0.1.0\n\n- `Registry.CodecName` replaces `Registry.CodecOf`\n", []string{"Registry.CodecName", "Registry.CodecOf"}},
	} {
		if got := Unmentioned(c.changelog, changed); !slices.Equal(got, c.missing) {
			t.Errorf("changelog %q: unmentioned %q, want %q", c.changelog, got, c.missing)
		}
	}
	// -w writes the first listing, then refuses the change until the
	// changelog names it.
	write("api/facility.txt", header+strings.Join(before, "\n")+"\n")
	write(changelogFile, "# Changes\n\n## Unreleased\n\nNothing yet.\n")
	saved := declared
	declared = decl
	defer func() { declared = saved }()
	if err := run(dir, true, nil); err == nil || !strings.Contains(err.Error(), "does not name Registry.CodecName, Codec.Doc, Registry.CodecOf in its newest section") {
		t.Errorf("-w with the change unnamed: %v", err)
	}
	if listed, _ := ReadListing(filepath.Join(dir, listingFile)); !slices.Equal(listed, before) {
		t.Errorf("-w refused but wrote %q", listed)
	}
	write(changelogFile, "# Changes\n\n## Unreleased\n\n- `Registry.CodecName` replaces `Registry.CodecOf`; `Codec.Doc` is new.\n")
	if err := run(dir, true, nil); err != nil {
		t.Fatal(err)
	}
	if listed, _ := ReadListing(filepath.Join(dir, listingFile)); !slices.Equal(listed, after) {
		t.Errorf("-w wrote %q, want %q", listed, after)
	}
}

// TestName checks the names a listing line is about.
func TestName(t *testing.T) {
	for _, c := range []struct{ line, pkg, name, member string }{
		{"pkg h5ingest/registry, func New() *Registry", "registry", "New", ""},
		{"pkg h5ingest/registry, func Start[O any](O, func(O) error) Starter", "registry", "Start", ""},
		{"pkg h5ingest/registry, method (*Registry) AddCodec(Codec) error", "registry", "Registry", "AddCodec"},
		{"pkg h5ingest/frame, method (Format) PixelSize() int", "frame", "Format", "PixelSize"},
		{"pkg h5ingest/registry, type Codec struct", "registry", "Codec", ""},
		{"pkg h5ingest/registry, type Codec struct, Read func([]compress.Filter, int) (compress.Codec, error)", "registry", "Codec", "Read"},
		{"pkg h5ingest/frame, type Format struct, embedded Geometry", "frame", "Format", "Geometry"},
		{"pkg h5ingest/registry, type Starter interface, unexported methods", "registry", "Starter", ""},
		{"pkg h5ingest/compress/compresstest, type Reader func([]compress.Filter, int) (compress.Codec, error)", "compresstest", "Reader", ""},
		{`pkg h5ingest/registry, const StreamRaw untyped string = "raw"`, "registry", "StreamRaw", ""},
		{"pkg h5ingest/frame, var PiMega Geometry", "frame", "PiMega", ""},
	} {
		if p, n, m := Name(c.line); p != c.pkg || n != c.name || m != c.member {
			t.Errorf("Name(%q) = %q, %q, %q; want %q, %q, %q", c.line, p, n, m, c.pkg, c.name, c.member)
		}
	}
}

// TestDeclaredPackagesSayIt checks that each declared package's doc
// comment says it is part of the facility API and points to
// docs/extending.md, whose section "The facility API" names each
// declared package, and each declared name of a package declared in part.
func TestDeclaredPackagesSayIt(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "extending.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## The facility API\n")
	if !ok {
		t.Fatal(`docs/extending.md has no section "## The facility API"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, p := range declared {
		rel := strings.TrimPrefix(p.Path, "h5ingest/")
		if !strings.Contains(section, "`"+rel+"`") {
			t.Errorf("docs/extending.md's facility API section does not name `%s`", rel)
		}
		for _, n := range p.Names {
			if !strings.Contains(section, n) {
				t.Errorf("docs/extending.md's facility API section does not name %s of %s", n, rel)
			}
		}
		text := packageDoc(t, filepath.Join(root, rel))
		if !strings.Contains(text, "h5ingest's facility API") || !strings.Contains(text, "docs/extending.md") {
			t.Errorf("package %s's doc comment does not say it is part of h5ingest's facility API, see docs/extending.md:\n%s", rel, text)
		}
	}
}

// packageDoc returns the package doc comments of the Go files in dir,
// tests left out.
func packageDoc(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if file.Doc != nil {
			docs = append(docs, file.Doc.Text())
		}
	}
	return strings.Join(docs, "\n")
}
