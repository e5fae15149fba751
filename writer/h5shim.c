#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5shim.h"

void h5i_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

struct errbuf {
	char inner[256], outer[256];
	unsigned n;
	int errnum;        // the first errno an entry names
	char *full;        // every entry, "; " between them
	size_t fulln, fullused;
};

// h5i_error_walk keeps the innermost entry of the stack (where the error
// was found) and the outermost (the API call), the first errno an entry
// names, and every entry in full.
static herr_t h5i_error_walk(unsigned pos, const H5E_error2_t *e, void *data) {
	struct errbuf *b = data;
	char *dst = pos == 0 ? b->inner : b->outer;
	const char *fn = e->func_name ? e->func_name : "?", *desc = e->desc ? e->desc : "?";
	snprintf(dst, sizeof b->inner, "%s(): %s", fn, desc);
	b->n = pos + 1;
	const char *p = strstr(desc, "errno = ");
	if (p != NULL && b->errnum == 0) {
		b->errnum = atoi(p + strlen("errno = "));
	}
	if (b->full != NULL && b->fullused + 1 < b->fulln) {
		int w = snprintf(b->full + b->fullused, b->fulln - b->fullused, "%s%s(): %s", pos == 0 ? "" : "; ", fn, desc);
		if (w > 0) {
			b->fullused += (size_t)w;
		}
	}
	return 0;
}

int h5i_error(char *buf, size_t n, char *full, size_t fulln) {
	struct errbuf b = {{0}, {0}, 0, 0, full, fulln, 0};
	if (n == 0) {
		return 0;
	}
	if (full != NULL && fulln > 0) {
		full[0] = 0;
	}
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5i_error_walk, &b);
	H5Eclear2(H5E_DEFAULT);
	if (b.n > 1) {
		snprintf(buf, n, "%s: %s", b.outer, b.inner);
	} else {
		snprintf(buf, n, "%s", b.inner);
	}
	return b.errnum;
}

hid_t h5i_type(int kind) {
	switch (kind) {
	case H5I_U8:
		return H5T_NATIVE_UINT8;
	case H5I_I8:
		return H5T_NATIVE_INT8;
	case H5I_U16:
		return H5T_NATIVE_UINT16;
	case H5I_U32:
		return H5T_NATIVE_UINT32;
	case H5I_I32:
		return H5T_NATIVE_INT32;
	case H5I_U64:
		return H5T_NATIVE_UINT64;
	case H5I_F64:
		return H5T_NATIVE_DOUBLE;
	case H5I_I64:
		return H5T_NATIVE_INT64;
	case H5I_F32:
		return H5T_NATIVE_FLOAT;
	}
	return -1;
}

hid_t h5i_bool_type(void) {
	hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
	signed char no = 0, yes = 1;
	if (t < 0) {
		return t;
	}
	if (H5Tenum_insert(t, "FALSE", &no) < 0 || H5Tenum_insert(t, "TRUE", &yes) < 0) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

hid_t h5i_string_type(size_t size) {
	hid_t t = H5Tcopy(H5T_C_S1);
	if (t < 0) {
		return t;
	}
	if (H5Tset_size(t, size ? size : H5T_VARIABLE) < 0 ||
	    H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

hid_t h5i_create_file(const char *name, int truncate) {
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0) {
		return fapl;
	}
	hid_t f = -1;
	if (H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0) {
		f = H5Fcreate(name, truncate ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT, fapl);
	}
	// H5Pclose clears the error stack: keep the failure's for the caller.
	hid_t stack = f < 0 ? H5Eget_current_stack() : -1;
	H5Pclose(fapl);
	if (stack >= 0) {
		H5Eset_current_stack(stack);
	}
	return f;
}

hid_t h5i_open_file(const char *name, int swmr) {
	unsigned flags = H5F_ACC_RDONLY;
	if (swmr) {
		flags |= H5F_ACC_SWMR_READ;
	}
	return H5Fopen(name, flags, H5P_DEFAULT);
}

hid_t h5i_create_dcpl(void) { return H5Pcreate(H5P_DATASET_CREATE); }

int h5i_plugins(int enable) {
	unsigned old;
	if (H5PLget_loading_state(&old) < 0) {
		return -1;
	}
	unsigned state = enable ? (old | H5PL_FILTER_PLUGIN) : (old & ~(unsigned)H5PL_FILTER_PLUGIN);
	if (H5PLset_loading_state(state) < 0) {
		return -1;
	}
	return (old & H5PL_FILTER_PLUGIN) != 0;
}

int h5i_libver_bounds(hid_t file, int *low, int *high) {
	hid_t fapl = H5Fget_access_plist(file);
	if (fapl < 0) {
		return -1;
	}
	H5F_libver_t lo, hi;
	herr_t r = H5Pget_libver_bounds(fapl, &lo, &hi);
	H5Pclose(fapl);
	if (r < 0) {
		return -1;
	}
	*low = (int)lo;
	*high = (int)hi;
	return 0;
}

// h5i_not_allocated_walk sets *data when an entry of the stack says that
// the chunk asked for has no storage.
static herr_t h5i_not_allocated_walk(unsigned pos, const H5E_error2_t *e, void *data) {
	(void)pos;
	if (e->desc && strstr(e->desc, "not allocated")) {
		*(int *)data = 1;
	}
	return 0;
}

int h5i_chunk_size(hid_t dset, const hsize_t *offset, hsize_t *size) {
	if (H5Dget_chunk_storage_size(dset, offset, size) >= 0) {
		return *size > 0;
	}
	int absent = 0;
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5i_not_allocated_walk, &absent);
	if (absent) {
		H5Eclear2(H5E_DEFAULT);
		return 0;
	}
	return -1;
}

int h5i_open_clear_status(const char *name) {
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0) {
		return -1;
	}
	hbool_t clear = 1;
	hid_t f = -1;
	if (H5Pset(fapl, "clear_status_flags", &clear) >= 0) {
		f = H5Fopen(name, H5F_ACC_RDWR, fapl);
	}
	hid_t stack = f < 0 ? H5Eget_current_stack() : -1;
	H5Pclose(fapl);
	if (stack >= 0) {
		H5Eset_current_stack(stack);
		return -1;
	}
	if (H5Fclose(f) < 0) {
		return -1;
	}
	return 0;
}
