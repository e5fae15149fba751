package fi

import (
	"strings"
	"testing"
)

// TestLoadErrors checks that a missing library, or one without
// libfabric's symbols, is a clear error that names it and leaves the
// loaded library in place.
func TestLoadErrors(t *testing.T) {
	for _, tt := range []struct{ soname, want string }{
		{"libfabric-absent.so.1", "libfabric-absent.so.1 not found (Debian package libfabric1): libfabric-absent.so.1: cannot open shared object file"},
		{"libc.so.6", "libc.so.6 not found (Debian package libfabric1): libc.so.6: no symbol fi_getinfo"},
	} {
		err := load(tt.soname)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("load(%q) = %v, want an error containing %q", tt.soname, err, tt.want)
		}
	}
	// The failed loads changed nothing: libfabric still answers.
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	info, err := GetInfo("tcp", "127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Provider(); !strings.Contains(got, "tcp") {
		t.Errorf("provider %q, want tcp", got)
	}
	info.Close()
}
