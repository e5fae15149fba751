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
	// No system error named (an HDF5 stack without one): the output
	// directory's state says it.
	gone := filepath.Join(t.TempDir(), "gone")
	hdf5 := errors.New("flush /data/s1.h5: H5Fflush(): unable to flush")
	var oe *OperatorError
	if got := explainAt(hdf5, gone); !errors.As(got, &oe) || oe.Kind != "directory gone" || !errors.Is(got, hdf5) {
		t.Errorf("a failure in a directory that is gone: %v, want directory gone", got)
	}
	if got := explainAt(hdf5, t.TempDir()); got != hdf5 {
		t.Errorf("a failure in a sound directory: %v, want it as it is", got)
	}
}
