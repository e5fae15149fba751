package gpu_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKitMatchesMakefile checks, without building anything, that make
// gpu-binaries builds every binary run.sh runs, from a package of this
// repository, and that run.sh runs each binary in the directory of the
// package it was built from (where its test data is). A package that moves
// or goes away then fails here, in go test, and not on a lent GPU machine.
// make test also runs make gpu-binaries, which builds them.
func TestKitMatchesMakefile(t *testing.T) {
	root := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	built := builtBinaries(t, string(mk))
	if len(built) == 0 {
		t.Fatal("make gpu-binaries builds no test binary (no `go test -c -o bin/gpu/NAME ./PKG` line)")
	}
	for name, pkg := range built {
		if !hasTestFiles(filepath.Join(root, pkg)) {
			t.Errorf("make gpu-binaries builds %s from ./%s, which is no package with tests here", name, pkg)
		}
	}
	required := regexp.MustCompile(`(?m)^for b in ([^;]+); do`).FindStringSubmatch(string(script))
	if required == nil {
		t.Fatal("run.sh: no `for b in ...` list of the binaries it needs")
	}
	for _, b := range strings.Fields(required[1]) {
		if _, ok := built[b]; !ok && strings.HasSuffix(b, ".test") {
			t.Errorf("run.sh needs bin/gpu/%s, which make gpu-binaries does not build", b)
		}
	}
	steps := regexp.MustCompile(`(?m)^step (\S+) (\S+) "\$bin/(\S+)"`).FindAllStringSubmatch(string(script), -1)
	if len(steps) == 0 {
		t.Fatal("run.sh runs no step")
	}
	for _, s := range steps {
		name, dir, bin := s[1], s[2], s[3]
		pkg, ok := built[bin]
		switch {
		case !ok:
			t.Errorf("run.sh step %s runs bin/gpu/%s, which make gpu-binaries does not build", name, bin)
		case dir != pkg:
			t.Errorf("run.sh step %s runs %s in %s; it is built from ./%s, whose directory holds its test data", name, bin, dir, pkg)
		}
	}
}

// TestFirstContactNamesBuiltFiles checks, without building anything, that
// every file first-contact.sh takes from bin/gpu is one make gpu-binaries
// makes (a test binary, or the archive pack-h5ingest.sh packs), and that
// it runs run.sh.
func TestFirstContactNamesBuiltFiles(t *testing.T) {
	root := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("first-contact.sh")
	if err != nil {
		t.Fatal(err)
	}
	made := builtBinaries(t, string(mk))
	recipe := regexp.MustCompile(`(?ms)^gpu-binaries:.*?\n\n`).FindString(string(mk))
	packed := regexp.MustCompile(`tools/gpu/pack-h5ingest\.sh \S+ bin/gpu/(\S+)`).FindStringSubmatch(recipe)
	if packed == nil {
		t.Fatal("make gpu-binaries packs no h5ingest (no `tools/gpu/pack-h5ingest.sh BINARY bin/gpu/ARCHIVE` line)")
	}
	made[packed[1]] = "cmd/h5ingest"
	named := regexp.MustCompile(`\$bin/([A-Za-z0-9._-]+)`).FindAllStringSubmatch(string(script), -1)
	if len(named) == 0 {
		t.Fatal("first-contact.sh takes nothing from bin/gpu")
	}
	for _, m := range named {
		if _, ok := made[m[1]]; !ok {
			t.Errorf("first-contact.sh takes bin/gpu/%s, which make gpu-binaries does not make", m[1])
		}
	}
	if !strings.Contains(string(script), `"$root/tools/gpu/run.sh"`) {
		t.Error("first-contact.sh does not run tools/gpu/run.sh")
	}
}

// builtBinaries returns the test binaries the Makefile's gpu-binaries
// recipe builds, by name, with the package each is built from.
func builtBinaries(t *testing.T, makefile string) map[string]string {
	t.Helper()
	recipe := regexp.MustCompile(`(?ms)^gpu-binaries:.*?\n\n`).FindString(makefile)
	if recipe == "" {
		t.Fatal("Makefile: no gpu-binaries target")
	}
	built := map[string]string{}
	for _, m := range regexp.MustCompile(`test -c -o bin/gpu/(\S+) \./(\S+)`).FindAllStringSubmatch(recipe, -1) {
		built[m[1]] = filepath.Clean(m[2])
	}
	return built
}

func hasTestFiles(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	return len(m) > 0
}
