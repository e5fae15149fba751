package cli

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// networkLibs are the libraries that only commands opening the network may
// load: libfabric and the provider libraries it pulls in, whose
// constructors sleep at load on Debian.
var networkLibs = []string{"libfabric", "libpsm", "libinfinipath", "libefa", "librdmacm"}

// TestNoFabricLinked checks that the executable does not name libfabric
// (nor what it pulls in) among the libraries the loader maps at start.
func TestNoFabricLinked(t *testing.T) {
	f, err := elf.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	needed, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range needed {
		for _, bad := range networkLibs {
			if strings.HasPrefix(lib, bad) {
				t.Errorf("the executable needs %s (DT_NEEDED %v): every command would load it at start", lib, needed)
			}
		}
	}
}

// loadedLibs runs h5ingest with args and the dynamic loader's trace on
// (LD_DEBUG=files, which logs every library mapped, at start or by
// dlopen), and returns the trace.
func loadedLibs(t *testing.T, args ...string) string {
	t.Helper()
	cmd := command(args...)
	cmd.Env = append(cmd.Env, "LD_DEBUG=files")
	out, _ := cmd.CombinedOutput() // the exit status is the test's to judge
	return string(out)
}

// TestNetworkLibsLoadedOnDemand checks, with the loader's own trace, that
// commands which do not open the network never map libfabric or the
// provider libraries, and that one which does (send) maps libfabric when
// it opens the network: the trace sees dlopen, so the check has teeth.
func TestNetworkLibsLoadedOnDemand(t *testing.T) {
	capPath, _ := simulate(t, "--projections", "1", "--darks", "0", "--flats", "0")
	out := filepath.Join(t.TempDir(), "one.h5")
	if code := run([]string{"replay", capPath, "-o", out, "--projections", "1"}); code != exitOK {
		t.Fatalf("replay: exit status %d", code)
	}
	for _, args := range [][]string{
		{"--help"},
		{"profiles", "list"},
		{"verify", out},
	} {
		trace := loadedLibs(t, args...)
		if !strings.Contains(trace, "file=") {
			t.Fatalf("h5ingest %v: no loader trace with LD_DEBUG=files:\n%s", args, trace[max(0, len(trace)-2000):])
		}
		for _, lib := range networkLibs {
			if strings.Contains(trace, "file="+lib) {
				t.Errorf("h5ingest %v maps %s:\n%s", args, lib, lineWith(trace, "file="+lib))
			}
		}
	}
	// Port 1 on loopback: nothing listens, the send fails after loading
	// libfabric and asking it for an endpoint.
	trace := loadedLibs(t, "send", capPath, "--to", "127.0.0.1:1", "--timeout", (300 * time.Millisecond).String())
	if !strings.Contains(trace, "file=libfabric.so.1") {
		t.Errorf("send did not load libfabric.so.1 (or the trace misses dlopen):\n%s", trace[max(0, len(trace)-3000):])
	}
}
