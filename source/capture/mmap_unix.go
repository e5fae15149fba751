//go:build unix

package capture

import (
	"os"
	"syscall"
	"unsafe"
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

// dropPages lets the pages wholly inside b, a part of a mapping, go from
// the process's resident set: they stay in the page cache, and a later
// read maps them again. So a replay's resident set stays at the frames in
// flight, however long the capture.
func dropPages(b []byte) {
	page := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first := int((p+page-1)&^(page-1) - p)        // the first whole page's offset in b
	end := int((p+uintptr(len(b)))&^(page-1) - p) // the end of the last whole page
	if end <= first {
		return
	}
	_ = syscall.Madvise(b[first:end], syscall.MADV_DONTNEED)
}

// fileSize returns the size of the open file fd, without allocating, or
// false where it cannot be read.
func fileSize(fd int) (int64, bool) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, false
	}
	return st.Size, true
}
