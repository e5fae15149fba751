package cuda_test

import (
	"debug/elf"
	"os"
	"strings"
	"testing"
)

// TestDynamicDeps checks that this test binary, which carries every GPU
// check to a GPU machine, needs no shared library beyond the C library's
// family: libcuda.so.1 is opened at run time, and nothing here links HDF5,
// libfabric or the CUDA toolkit.
func TestDynamicDeps(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Skipf("test binary is not ELF: %v", err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		ok := false
		for _, allowed := range []string{"libc.so.", "libdl.so.", "libpthread.so.", "ld-linux"} {
			ok = ok || strings.HasPrefix(lib, allowed)
		}
		if !ok {
			t.Errorf("test binary needs %s; want only libc, libdl and libpthread", lib)
		}
	}
	t.Logf("needs %v", libs)
}
