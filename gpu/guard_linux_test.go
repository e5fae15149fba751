package gpu

import (
	"syscall"
	"testing"
)

// guardedBytes returns n bytes that end where a page no one may read
// begins, so that a decoder reading past them faults.
func guardedBytes(tb testing.TB, n int) []byte {
	mem, page := guardedMapping(tb, n)
	return mem[len(mem)-page-n : len(mem)-page : len(mem)-page]
}

// guardedAfter returns n bytes that begin where a page no one may read or
// write ends, so that a decoder reading or writing before them (a chip at
// 180 degrees read backwards) faults.
func guardedAfter(tb testing.TB, n int) []byte {
	mem, page := guardedMapping(tb, n)
	return mem[page : page+n : page+n]
}

// guardedMapping maps n bytes rounded up to pages between two pages no one
// may read, for the rest of the test, and returns the mapping and the page
// size.
func guardedMapping(tb testing.TB, n int) ([]byte, int) {
	page := syscall.Getpagesize()
	size := (n+page-1)/page*page + 2*page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		tb.Fatalf("mapping %d bytes: %v", size, err)
	}
	tb.Cleanup(func() { syscall.Munmap(mem) })
	for _, guard := range [][]byte{mem[:page], mem[size-page:]} {
		if err := syscall.Mprotect(guard, syscall.PROT_NONE); err != nil {
			tb.Fatalf("protecting a guard page: %v", err)
		}
	}
	return mem, page
}
