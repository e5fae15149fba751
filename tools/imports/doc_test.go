package imports

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPackageTableOrder checks the order docs/extending.md's table of
// packages ("The packages, bottom to top") gives: each package of a row
// depends, directly or through others, on no package of its own row or
// of a row below it, as go list -deps says.
func TestPackageTableOrder(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "extending.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## The packages, bottom to top\n")
	if !ok {
		t.Fatal(`docs/extending.md has no section "The packages, bottom to top"`)
	}
	table, _, _ = strings.Cut(strings.TrimLeft(table, "\n"), "\n\n")
	row := map[string]int{}
	var pkgs []string
	name := regexp.MustCompile("`([a-z0-9/]+)`")
	for i, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			if _, err := os.Stat(filepath.Join("..", "..", m[1], "go.mod")); err == nil {
				continue // a facility's module, above them all
			}
			row["h5ingest/"+m[1]] = i
			pkgs = append(pkgs, "h5ingest/"+m[1])
		}
	}
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages in the table: %v", len(pkgs), pkgs)
	}
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Deps"}, pkgs...)...)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Deps {
			if at, ok := row[d]; ok && at >= row[p.ImportPath] {
				t.Errorf("docs/extending.md's table lists %s at or after %s, which depends on it (go list -deps %s)",
					strings.TrimPrefix(d, "h5ingest/"), strings.TrimPrefix(p.ImportPath, "h5ingest/"), p.ImportPath)
			}
		}
	}
}
