package scan

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"h5ingest/receive"
	"h5ingest/writer"
)

// TestExplain: each failure an operator can meet is one line naming the
// cause first and what to do last, and still wraps the failure; any
// other error is left as it is.
func TestExplain(t *testing.T) {
	pathErr := func(errno syscall.Errno) error {
		return fmt.Errorf("write chunk of frame 3 to /data/s1.h5: %w", &os.PathError{Op: "write", Path: "/data/.s1.h5.part", Err: errno})
	}
	for _, tc := range []struct {
		err        error
		kind, does string // does: a word of the remedy
	}{
		{pathErr(syscall.ENOSPC), "disk full", "free space"},
		{pathErr(syscall.EDQUOT), "disk quota exceeded", "quota"},
		{pathErr(syscall.EFBIG), "file too large", "LimitFSIZE"},
		{pathErr(syscall.EROFS), "read-only file system", "remount"},
		{pathErr(syscall.EACCES), "permission denied", "owner"},
		{pathErr(syscall.ENOENT), "directory gone", "create the output directory"},
		{fmt.Errorf("listen address 127.0.0.1:9000 is not free: %w", &net.OpError{Op: "listen", Err: &os.SyscallError{Syscall: "bind", Err: syscall.EADDRINUSE}}), "port taken", "source.port"},
		{fmt.Errorf("wait for a sender on 127.0.0.1:9000: none in 1m0s: %w", receive.ErrNoSender), "detector silent", "source.connect_timeout"},
	} {
		got := Explain(tc.err)
		var oe *OperatorError
		msg := got.Error()
		if !errors.As(got, &oe) || oe.Kind != tc.kind || !errors.Is(got, errors.Unwrap(tc.err)) {
			t.Errorf("%v: explained as %v, want %s wrapping it", tc.err, got, tc.kind)
			continue
		}
		if !strings.HasPrefix(msg, tc.kind+": "+tc.err.Error()+"; ") || !strings.Contains(oe.Remedy, tc.does) || strings.Contains(msg, "\n") {
			t.Errorf("%s: %q, want %q, the error, then a remedy saying %q", tc.kind, msg, tc.kind, tc.does)
		}
		if Explain(got) != got {
			t.Errorf("%s: explained twice", tc.kind)
		}
	}
	plain := errors.New("frame 3: bad header")
	if Explain(plain) != plain || Explain(nil) != nil {
		t.Error("an error no operator mends was changed")
	}
	// An HDF5 failure whose stack names no system error: the output
	// directory's state says what is wrong, where anything is; any other
	// failure is left as it is.
	garbage := filepath.Join(t.TempDir(), "not.h5")
	if err := os.WriteFile(garbage, []byte("not an HDF5 file"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, hdf5 := writer.OpenPlain(garbage)
	if hdf5 == nil || writer.Detail(hdf5) == "" || Explain(hdf5) != hdf5 {
		t.Fatalf("opening a file that is not HDF5: %v, want an HDF5 failure naming no system error", hdf5)
	}
	gone := filepath.Join(t.TempDir(), "gone")
	var oe *OperatorError
	if got := ExplainAt(hdf5, gone); !errors.As(got, &oe) || oe.Kind != "directory gone" || !errors.Is(got, hdf5) {
		t.Errorf("an HDF5 failure in a directory that is gone: %v, want directory gone", got)
	}
	if got := ExplainAt(hdf5, t.TempDir()); got != hdf5 {
		t.Errorf("an HDF5 failure in a sound directory: %v, want it as it is", got)
	}
	if got := ExplainAt(plain, gone); got != plain {
		t.Errorf("a failure not of the file in a directory that is gone: %v, want it as it is", got)
	}
}
