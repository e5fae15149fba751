//go:build unix

package capture

import (
	"os"
	"syscall"
)

// mapFile maps the regular file f into memory, read-only, for reading in
// order, and returns the mapping; nil where it cannot be mapped (not a
// regular file, empty, too large to address), which is then read through
// a buffer instead.
func mapFile(f *os.File) []byte {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 || int64(int(st.Size())) != st.Size() {
		return nil
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	// Read ahead, and let pages behind the reader go first.
	_ = syscall.Madvise(data, syscall.MADV_SEQUENTIAL)
	return data
}

// unmap undoes mapFile.
func unmap(data []byte) error { return syscall.Munmap(data) }
