package writer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// One writer per output file: Create and CreateMaster take an exclusive
// lock (flock) on a small lock file beside the output before they remove,
// truncate or create anything, and Close gives it back after the rename.
// A second scan of the same file, with Overwrite or not, is refused with
// an error that names the process holding the lock, and nothing of the
// first scan is touched. The lock file holds that process's id; a writer
// killed leaves it behind unlocked, and the next writer takes it over.
//
// The lock is a separate file, not the HDF5 file itself: libhdf5 takes and
// drops locks of its own on the file it opens, and a scan's file changes
// name (from its temporary name to its final one) while it is held.

// ErrLocked is returned, wrapped in a *LockedError, when another process
// writes the file.
var ErrLocked = errors.New("is being written by another process")

// LockedError says which process writes a file.
type LockedError struct {
	Path string // the output file
	PID  int    // the process holding its lock; 0 when unknown
}

func (e *LockedError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%s is being written by another scan (%s holds its lock %s): refusing to touch it; wait for that scan to end or write to another file",
		e.Path, who, LockName(e.Path))
}

// Unwrap makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Unwrap() error { return ErrLocked }

// LockName returns the name of the lock file of the output file path: a
// hidden name beside it.
func LockName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".lock")
}

// fileLock is a held lock of an output file. Its file also keeps room on
// the output's file system for the writer's records (see reserve).
type fileLock struct {
	f        *os.File
	name     string
	head     int64 // bytes of the process id line
	reserved int64 // bytes allocated to the lock file
}

// Room kept for the records and the metadata a writer writes after the
// disk filled: reserveBase, plus reservePerFrame for every frame of an
// extendible file (its records grow with the scan), reserved in steps of
// extendibleChunk frames.
const (
	reserveBase     = 1 << 20
	reservePerFrame = 160
)

// noReserve turns the reserve off, for tests of a disk that fills with
// no room kept.
var noReserve bool

// reserveFor returns the room to keep for a file of n frames.
func reserveFor(n int) int64 {
	steps := (int64(n) + extendibleChunk - 1) / extendibleChunk
	return reserveBase + steps*extendibleChunk*reservePerFrame
}

// reserve makes the lock file take size bytes of the file system, so that
// when the disk fills, giving them back (unreserve) leaves the writer room
// to write its records, close the file and clear its open-for-writing
// flags. A lock that cannot reserve the room fails: the disk is full
// already, and the scan stops while its records still fit.
func (l *fileLock) reserve(size int64) error {
	if l == nil || l.f == nil || size <= l.reserved || noReserve {
		return nil
	}
	err := syscall.Fallocate(int(l.f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		// No fallocate on this file system: write the room out.
		zeros := make([]byte, 64<<10)
		err = nil
		for off := max(l.reserved, l.head); off < size && err == nil; off += int64(len(zeros)) {
			_, err = l.f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off)
		}
		if err == nil {
			err = l.f.Sync()
		}
	}
	if err != nil {
		return fmt.Errorf("reserve %d bytes beside the file for its records: %w", size, err)
	}
	l.reserved = size
	return nil
}

// unreserve gives the reserved room back to the file system.
func (l *fileLock) unreserve() {
	if l == nil || l.f == nil || l.reserved == 0 {
		return
	}
	l.f.Truncate(l.head)
	l.reserved = 0
}

// Held is the lock of an output file taken ahead of the scan that writes
// it (see Hold).
type Held struct {
	name string // the lock file, absolute
}

// held are the locks taken with Hold and not yet taken over by Create or
// CreateMaster, by the absolute name of their lock file.
var held = struct {
	sync.Mutex
	m map[string]*fileLock
}{m: map[string]*fileLock{}}

// Hold takes the lock of output file path now, for a scan that checks its
// files long before it writes them (acquire, while it waits for the
// detector): meanwhile no other scan can take the file. Create or
// CreateMaster of path in this process takes the held lock over; Release
// gives it back if neither did. It returns a *LockedError when another
// process holds the lock.
func Hold(path string) (*Held, error) {
	abs, err := filepath.Abs(LockName(path))
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l, err := lockOutput(path)
	if err != nil {
		return nil, err
	}
	held.Lock()
	defer held.Unlock()
	held.m[abs] = l
	return &Held{name: abs}, nil
}

// Release gives the lock back unless Create or CreateMaster took it over.
// Releasing nil does nothing.
func (h *Held) Release() {
	if h == nil {
		return
	}
	held.Lock()
	l := held.m[h.name]
	delete(held.m, h.name)
	held.Unlock()
	l.release()
}

// takeHeld returns the lock of path that Hold took, and forgets it; nil
// when none is held.
func takeHeld(path string) *fileLock {
	abs, err := filepath.Abs(LockName(path))
	if err != nil {
		return nil
	}
	held.Lock()
	defer held.Unlock()
	l := held.m[abs]
	delete(held.m, abs)
	if l != nil && !sameFile(l.f, l.name) {
		// Removed behind our back: no lock any more.
		l.f.Close()
		return nil
	}
	return l
}

// lockOutput takes the lock of output file path, or returns a
// *LockedError when another process holds it. A lock this process holds
// with Hold is taken over.
func lockOutput(path string) (*fileLock, error) {
	if l := takeHeld(path); l != nil {
		return l, nil
	}
	name := LockName(path)
	busy := 0
	for range 10 {
		f, err := openLock(name, syscall.O_RDWR|syscall.O_CREAT)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			pid := readPID(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				// A pre-scan probe (LockHolder) holds it for an instant.
				if busy++; busy < 5 {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				return nil, &LockedError{Path: path, PID: pid}
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// A writer that finished removes its lock file while holding it:
		// a lock taken on a file no longer at the name is no lock.
		if !sameFile(f, name) {
			f.Close()
			continue
		}
		// A lock file that cannot be written (a full disk) is not left
		// behind: the lock is held, so it is this scan's to remove.
		if err := f.Truncate(0); err != nil {
			os.Remove(name)
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		head := []byte(strconv.Itoa(os.Getpid()) + "\n")
		if _, err := f.WriteAt(head, 0); err != nil {
			os.Remove(name)
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return &fileLock{f: f, name: name, head: int64(len(head))}, nil
	}
	return nil, fmt.Errorf("lock %s: %s keeps changing", path, name)
}

// ErrLockLink is returned, wrapped, when the lock file of an output is a
// symbolic link, or a file with another name elsewhere (a hard link): a
// writer truncates and writes its lock file, so it never follows one.
var ErrLockLink = errors.New("is a link")

// openLock opens the lock file name with flags (O_RDONLY, or O_RDWR and
// O_CREAT), never through a symbolic link and never a file that has
// another name: what it opens is a regular file in the output's
// directory, or an error wrapping ErrLockLink says what is there.
func openLock(name string, flags int) (*os.File, error) {
	fd, err := syscall.Open(name, flags|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0o644)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("lock file %s %w (symbolic link): refusing to write through it; remove it and start again", name, ErrLockLink)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		syscall.Close(fd)
		return nil, fmt.Errorf("lock file %s is not a regular file (mode %#o): refusing to use it; remove it and start again", name, st.Mode&syscall.S_IFMT)
	case st.Nlink > 1:
		syscall.Close(fd)
		return nil, fmt.Errorf("lock file %s %w (%d names of one file): refusing to write through it; remove it and start again", name, ErrLockLink, st.Nlink)
	}
	// Blocking again: reads and writes of a regular file do not block
	// anyway, and the runtime poller has no part in them.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// release removes the lock file and gives the lock back. Releasing nil
// does nothing.
func (l *fileLock) release() {
	if l == nil || l.f == nil {
		return
	}
	// Only the name of this lock: a file put there meanwhile stays.
	if sameFile(l.f, l.name) {
		os.Remove(l.name)
	}
	l.f.Close()
	l.f = nil
}

// LockHolder reports whether another process holds the lock of output
// file path, and its process id (0 when unknown). It takes no lock and
// creates nothing: it is the pre-scan check of a file another scan writes.
func LockHolder(path string) (pid int, locked bool, err error) {
	f, err := openLock(LockName(path), syscall.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lock of %s: %w", path, err)
	}
	defer f.Close()
	switch err := flock(f, syscall.LOCK_SH|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return readPID(f), true, nil
	case err != nil:
		return 0, false, fmt.Errorf("lock of %s: %w", path, err)
	}
	flock(f, syscall.LOCK_UN)
	return 0, false, nil
}

// CheckUnlocked returns a *LockedError when another process writes the
// output file path.
func CheckUnlocked(path string) error {
	pid, locked, err := LockHolder(path)
	if err != nil {
		return err
	}
	if locked {
		return &LockedError{Path: path, PID: pid}
	}
	return nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// readPID returns the process id a lock file holds, or 0.
func readPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}

// sameFile reports whether the open file f is the file at name itself,
// not a file a symbolic link at name points to.
func sameFile(f *os.File, name string) bool {
	var a, b syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &a); err != nil {
		return false
	}
	if err := syscall.Lstat(name, &b); err != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
