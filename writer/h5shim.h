// C helpers for package writer: the parts of the HDF5 C API that cgo cannot
// reach directly (macros that expand to function calls, callbacks) and a few
// short sequences that would otherwise cross the cgo boundary many times.
// Every function that returns hid_t returns a negative value on failure and
// leaves the HDF5 error stack for h5i_error to read.

#ifndef H5INGEST_WRITER_H5SHIM_H
#define H5INGEST_WRITER_H5SHIM_H

#include <hdf5.h>

// Kinds of native element types, as package writer names them.
enum {
	H5I_U8 = 1,
	H5I_I8,
	H5I_U16,
	H5I_U32,
	H5I_I32,
	H5I_U64,
	H5I_F64,
	H5I_I64,
	H5I_F32,
};

// h5i_quiet turns off the automatic printing of the calling thread's error
// stack (the library is thread-safe, so each thread has its own stack).
void h5i_quiet(void);

// h5i_error writes the outermost (API) and innermost entries of the calling
// thread's error stack into buf (at most n bytes), every entry into full
// (at most fulln bytes, for a debug log), clears the stack and returns the
// system errno an entry names ("errno = 28", as the sec2 driver's do), 0
// where none does.
int h5i_error(char *buf, size_t n, char *full, size_t fulln);

// h5i_type returns the library's predefined native type of a kind (not to be
// closed), or -1 for an unknown kind.
hid_t h5i_type(int kind);

// h5i_string_type returns a new UTF-8 string type of size bytes,
// null-terminated, or variable-length when size is 0.
hid_t h5i_string_type(size_t size);

// h5i_bool_type returns a new boolean type as h5py writes and reads one: an
// enumeration over int8 of FALSE (0) and TRUE (1).
hid_t h5i_bool_type(void);

// h5i_create_file creates name with the 1.10 file format as both bounds:
// the low one because SWMR needs it, the high one so that a build against a
// newer library still writes files that HDF5 1.10 reads. Exclusive unless
// truncate is set.
hid_t h5i_create_file(const char *name, int truncate);

// h5i_open_file opens name read-only, as a SWMR reader when swmr is set.
hid_t h5i_open_file(const char *name, int swmr);

// h5i_create_dcpl returns a new dataset creation property list.
hid_t h5i_create_dcpl(void);

// h5i_plugins sets whether libhdf5 may load filter plugins and returns the
// previous loading state, or a negative value on failure.
int h5i_plugins(int enable);

// h5i_libver_bounds reads the library version bounds of open file file into
// low and high (H5F_libver_t values); 0 on success, -1 on failure.
int h5i_libver_bounds(hid_t file, int *low, int *high);

// h5i_chunk_size looks up the chunk of dset at offset through the chunk
// index (a direct lookup, not a walk of the whole index) and stores its
// size: 1 when the chunk exists, 0 when it was never written, -1 on any
// other failure (the error stack is left for h5i_error).
int h5i_chunk_size(hid_t dset, const hsize_t *offset, hsize_t *size);

// h5i_open_clear_status opens name for writing with the status flags of its
// superblock cleared (what h5clear -s does, through the library's
// "clear_status_flags" file access property) and closes it again; 0 on
// success, -1 on failure.
int h5i_open_clear_status(const char *name);

#endif
