package writer

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestLockOneWriter starts a scan and tries a second scan of the same file,
// with and without Overwrite, while the first writes: both are refused with
// a *LockedError naming the file and this process, before touching
// anything, and the first scan's file completes with every frame.
func TestLockOneWriter(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := w.WriteChunk(i, 0, pattern(i, o.Height, o.Width, o.ElemSize)); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(i, testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	part, err := os.ReadFile(TempName(o.Path))
	if err != nil {
		t.Fatal(err)
	}
	for _, overwrite := range []bool{false, true} {
		second := o
		second.Overwrite = overwrite
		_, err := Create(second)
		var le *LockedError
		if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || le.PID != os.Getpid() ||
			!strings.Contains(err.Error(), o.Path) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
			t.Errorf("second Create (overwrite %v) while the first writes: %v, want a LockedError naming %s and process %d",
				overwrite, err, o.Path, os.Getpid())
		}
	}
	if now, err := os.ReadFile(TempName(o.Path)); err != nil || !bytes.Equal(now, part) {
		t.Errorf("the refused scans touched the running scan's temporary file (%v)", err)
	}
	if pid, locked, err := LockHolder(o.Path); err != nil || !locked || pid != os.Getpid() {
		t.Errorf("LockHolder while writing: %d %v %v, want this process", pid, locked, err)
	}
	for i := 3; i < o.Frames; i++ {
		if err := w.WriteChunk(i, 0, pattern(i, o.Height, o.Width, o.ElemSize)); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(i, testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	checkKept(t, o.Path, o, o.Frames)
	if _, err := os.Lstat(LockName(o.Path)); !os.IsNotExist(err) {
		t.Errorf("lock file after Close: %v", err)
	}
	if _, locked, err := LockHolder(o.Path); locked || err != nil {
		t.Errorf("LockHolder after Close: locked %v, %v", locked, err)
	}
	// Overwriting the finished file is allowed: nobody writes it.
	o.Overwrite = true
	writeTestFile(t, o, pipeNone)
}

// TestLockStale leaves a lock file as a killed writer does (unlocked, with
// its process id): the next writer takes it over.
func TestLockStale(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutCXI, pipeNone)
	if err := os.WriteFile(LockName(o.Path), []byte("99999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, locked, err := LockHolder(o.Path); locked || err != nil {
		t.Errorf("LockHolder of a stale lock file: locked %v, %v", locked, err)
	}
	writeTestFile(t, o, pipeNone)
}

// TestLockMaster holds the lock of a master file, as a scan writing it
// does: CreateMaster, even with Overwrite, is refused and writes nothing.
func TestLockMaster(t *testing.T) {
	o := masterOptions(t.TempDir(), LayoutNXtomo)
	l, err := lockOutput(o.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	o.Overwrite = true
	if err := CreateMaster(o); !errors.Is(err, ErrLocked) {
		t.Errorf("CreateMaster of a locked file: %v, want ErrLocked", err)
	}
	for _, name := range []string{o.Path, TempName(o.Path)} {
		if _, err := os.Lstat(name); !os.IsNotExist(err) {
			t.Errorf("%s after a refused CreateMaster: %v", name, err)
		}
	}
}

// TestLockHeld takes a file's lock ahead with Hold: others see it locked,
// Create and CreateMaster in this process take it over (and give it back
// at Close), and Release of a lock no file took removes its lock file.
func TestLockHeld(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(dir, LayoutCXI, pipeNone)
	m := masterOptions(dir, LayoutNXtomo)
	for _, path := range []string{o.Path, m.Path} {
		h, err := Hold(path)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release()
		if pid, locked, err := LockHolder(path); !locked || pid != os.Getpid() || err != nil {
			t.Errorf("LockHolder of a held lock: %d, %v, %v; want this process", pid, locked, err)
		}
	}
	writeTestFile(t, o, pipeNone)
	if err := CreateMaster(m); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{o.Path, m.Path} {
		if _, err := os.Lstat(LockName(path)); !os.IsNotExist(err) {
			t.Errorf("lock of %s after Close: %v, want it removed", path, err)
		}
	}
	h, err := Hold(filepath.Join(dir, "other.h5"))
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if _, err := os.Lstat(filepath.Join(dir, ".other.h5.lock")); !os.IsNotExist(err) {
		t.Errorf("lock after Release: %v, want it removed", err)
	}
}

// TestLockFullDisk creates a file on a file system already full: Create
// fails naming the disk's error, and leaves no file behind, not even the
// lock file (it used to leave an empty .NAME.lock).
func TestLockFullDisk(t *testing.T) {
	dir := tmpfs(t, "256k")
	fill, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = fill.Write(make([]byte, 4096))
	}
	fill.Close()
	o := testOptions(dir, LayoutCXI, pipeNone)
	if _, err := Create(o); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Create on a full disk: %v, want no space left", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left on the full disk: %v, want only the filler", entries)
	}
}

// TestLockLinkRefused plants the lock file of a scan's output as a link
// to a file elsewhere (symbolic, dangling, hard) or as a named pipe:
// Create, CreateMaster, Hold and LockHolder refuse it with an error that
// names the lock file, and the file it points to is left as it was, as is
// the directory (no .part, no final file).
func TestLockLinkRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(lock, victim string) error
		want  string
	}{
		{"symbolic link", func(lock, victim string) error { return os.Symlink(victim, lock) }, "symbolic link"},
		{"dangling symbolic link", func(lock, victim string) error { return os.Symlink(victim+".none", lock) }, "symbolic link"},
		{"hard link", func(lock, victim string) error { return os.Link(victim, lock) }, "names of one file"},
		{"named pipe", func(lock, _ string) error { return syscall.Mkfifo(lock, 0o644) }, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim")
			if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			o := testOptions(dir, LayoutNXtomo, pipeNone)
			m := masterOptions(dir, LayoutNXtomo)
			for _, path := range []string{o.Path, m.Path} {
				if err := tc.plant(LockName(path), victim); err != nil {
					t.Fatal(err)
				}
			}
			var errs []error
			_, err := Create(o)
			errs = append(errs, err)
			o.Overwrite = true
			_, err = Create(o)
			errs = append(errs, err)
			errs = append(errs, CreateMaster(m))
			_, err = Hold(o.Path)
			errs = append(errs, err)
			_, _, err = LockHolder(o.Path)
			errs = append(errs, err)
			for i, err := range errs {
				if err == nil || !strings.Contains(err.Error(), LockName(o.Path)) && !strings.Contains(err.Error(), LockName(m.Path)) ||
					!strings.Contains(err.Error(), tc.want) {
					t.Errorf("call %d with the lock file a %s: %v, want an error naming the lock file and %q", i, tc.name, err, tc.want)
				}
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
				t.Errorf("the file the lock links to holds %q (%v), want it untouched", b, err)
			}
			for _, name := range []string{o.Path, TempName(o.Path), m.Path, TempName(m.Path)} {
				if _, err := os.Lstat(name); !os.IsNotExist(err) {
					t.Errorf("%s after the refused scans: %v, want none", name, err)
				}
			}
		})
	}
}

// TestTempLinkNotWrittenThrough plants a scan's temporary name
// (.NAME.part) as a symbolic link to a file elsewhere: without Overwrite
// the scan is refused; with it the link is removed and the scan writes a
// new file of its own. Either way the file the link points to is left as
// it was.
func TestTempLinkNotWrittenThrough(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testOptions(dir, LayoutNXtomo, pipeNone)
	m := masterOptions(dir, LayoutNXtomo)
	for _, path := range []string{o.Path, m.Path} {
		if err := os.Symlink(victim, TempName(path)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Create(o); !errors.Is(err, ErrExists) {
		t.Errorf("Create with its .part a link: %v, want ErrExists", err)
	}
	if err := CreateMaster(m); !errors.Is(err, ErrExists) {
		t.Errorf("CreateMaster with its .part a link: %v, want ErrExists", err)
	}
	o.Overwrite, m.Overwrite = true, true
	writeTestFile(t, o, pipeNone)
	if err := CreateMaster(m); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("the file the .part linked to holds %d bytes beginning %q (%v), want it untouched", len(b), b[:min(len(b), 16)], err)
	}
	for _, path := range []string{o.Path, m.Path} {
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, want the scan's regular file", path, err)
		}
	}
	checkKept(t, o.Path, o, o.Frames)
}

// TestRecoverLinkRefused: recover of a .NAME.part that is a symbolic link
// refuses it, and neither the file it points to nor the final name is
// touched.
func TestRecoverLinkRefused(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir, ".x.h5.part")
	if err := os.Symlink(victim, part); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(part); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Recover of a link: %v, want refused as a symbolic link", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("the file the .part links to holds %q (%v), want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "x.h5")); !os.IsNotExist(err) {
		t.Errorf("final name after a refused recover: %v, want none", err)
	}
}

// TestRenameNoReplace renames onto a free name, and refuses with
// os.ErrExist a name that holds a file or a link, leaving both as they
// were.
func TestRenameNoReplace(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "from"), filepath.Join(dir, "to")
	if err := os.WriteFile(from, []byte("scan"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, plant := range []func() error{
		func() error { return os.WriteFile(to, []byte("intruder"), 0o644) },
		func() error { return os.Symlink(filepath.Join(dir, "none"), to) },
	} {
		os.Remove(to)
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		if err := renameNoReplace(from, to); !errors.Is(err, os.ErrExist) {
			t.Errorf("rename onto an existing name: %v, want ErrExist", err)
		}
		if b, err := os.ReadFile(from); err != nil || string(b) != "scan" {
			t.Errorf("source after a refused rename: %q, %v", b, err)
		}
	}
	os.Remove(to)
	if err := renameNoReplace(from, to); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(to); err != nil || string(b) != "scan" {
		t.Errorf("after the rename: %q, %v", b, err)
	}
}
