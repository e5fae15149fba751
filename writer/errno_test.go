package writer

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// fillUntilFailure writes frames of o until a write, flush or close
// fails, and returns that error (nil where every frame fits).
func fillUntilFailure(t *testing.T, o Options) error {
	t.Helper()
	w, err := Create(o)
	if err != nil {
		return err
	}
	for i := range o.Frames {
		if err := w.WriteChunk(i, 0, pattern(i, o.Height, o.Width, o.ElemSize)); err != nil {
			w.Close()
			return err
		}
		if i%16 == 15 {
			if err := w.Flush(); err != nil {
				w.Close()
				return err
			}
		}
	}
	return w.Close()
}

// bigOptions returns options of a scan of many frames in dir, far more
// than a small file system holds.
func bigOptions(dir string) Options {
	o := testOptions(dir, LayoutCXI, pipeNone)
	o.Frames, o.Translation = 20000, nil
	return o
}

// checkOneLine checks that err names the system error want in one line,
// in the system's words, without HDF5's stack, which Detail holds.
func checkOneLine(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %q does not wrap %v", err, want)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || strings.Contains(msg, "H5FD") || !strings.HasSuffix(msg, want.Error()) {
		t.Errorf("error %q: want one line ending in %q, without HDF5's stack", msg, want.Error())
	}
	if d := Detail(err); d != "" && !strings.Contains(d, "errno = ") {
		t.Errorf("Detail %q lacks the stack's errno", d)
	}
}

// TestWriteFailsOnFileSizeLimit writes, in a child process whose file
// size limit (RLIMIT_FSIZE) is 1 MiB, until a write fails: the error
// wraps EFBIG and says so in one line.
func TestWriteFailsOnFileSizeLimit(t *testing.T) {
	if dir := os.Getenv("H5INGEST_TEST_FSIZE_DIR"); dir != "" {
		lim := syscall.Rlimit{Cur: 1 << 20, Max: 1 << 20}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			t.Fatal(err)
		}
		err := fillUntilFailure(t, bigOptions(dir))
		checkOneLine(t, err, syscall.EFBIG)
		t.Logf("file size limit: %v", err)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriteFailsOnFileSizeLimit$", "-test.v")
	cmd.Env = append(os.Environ(), "H5INGEST_TEST_FSIZE_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "file too large") {
		t.Errorf("the child under a file size limit: %v\n%s", err, out)
	}
}
