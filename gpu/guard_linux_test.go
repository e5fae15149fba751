package gpu

import (
	"syscall"
	"testing"
)

// guardedBytes returns n bytes that end where a page no one may read
// begins, so that a decoder reading past them faults.
func guardedBytes(tb testing.TB, n int) []byte {
	page := syscall.Getpagesize()
	size := (n+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		tb.Fatalf("mapping %d bytes: %v", size, err)
	}
	tb.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[size-page:], syscall.PROT_NONE); err != nil {
		tb.Fatalf("protecting the guard page: %v", err)
	}
	return mem[size-page-n : size-page : size-page]
}

// guardedAfter returns n bytes that start where a page no one may read or
// write ends, so that a decoder reading or writing before them faults.
func guardedAfter(tb testing.TB, n int) []byte {
	page := syscall.Getpagesize()
	size := (n+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		tb.Fatalf("mapping %d bytes: %v", size, err)
	}
	tb.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[:page], syscall.PROT_NONE); err != nil {
		tb.Fatalf("protecting the guard page: %v", err)
	}
	return mem[page : page+n : page+n]
}
