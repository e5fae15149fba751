package writer

// This file is the cgo layer: thin wrappers over the HDF5 C library that
// return Go errors. Each wrapper locks its goroutine to the OS thread for the
// call, because libhdf5 (built thread-safe on Debian) keeps one error stack
// per thread, and the stack is read after the failing call.

/*
#cgo pkg-config: hdf5
#include <stdlib.h>
#include "h5shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"h5ingest/compress"
)

type hid = C.hid_t

// kind is a native element type (see h5shim.h).
type kind int

// Element kinds.
const (
	kindU8  kind = C.H5I_U8
	kindI8  kind = C.H5I_I8
	kindU16 kind = C.H5I_U16
	kindU32 kind = C.H5I_U32
	kindI32 kind = C.H5I_I32
	kindU64 kind = C.H5I_U64
	kindF64 kind = C.H5I_F64
	kindI64 kind = C.H5I_I64
	kindF32 kind = C.H5I_F32
)

func (k kind) id() hid { return C.h5i_type(C.int(k)) }

// unlimited is H5S_UNLIMITED, a dimension that may grow without bound.
const unlimited = ^uint64(0)

const (
	flagOptional = 0x0001 // H5Z_FLAG_OPTIONAL
	maxCdValues  = 32     // cd_values read back per filter, more than any filter we use
)

// h5Error is a failed HDF5 call: the operation, with names, the system
// error HDF5's stack names, if any, and the stack itself.
type h5Error struct {
	op    string
	stack string        // the API call's entry and the innermost
	full  string        // every entry, for a debug log
	errno syscall.Errno // 0: the stack names none
}

// Error says what failed and, where the stack names one, the system's
// error in its words ("no space left on device"); else the stack's two
// ends.
func (e *h5Error) Error() string {
	switch {
	case e.errno != 0:
		return e.op + ": " + e.errno.Error()
	case e.stack == "":
		return e.op + ": hdf5 call failed"
	}
	return e.op + ": " + e.stack
}

// Unwrap returns the system error behind the failure (errors.Is(err,
// syscall.ENOSPC)), nil where the stack names none.
func (e *h5Error) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

// Detail returns HDF5's whole error stack behind err, for a debug log; ""
// where err wraps no HDF5 failure.
func Detail(err error) string {
	var e *h5Error
	if !errors.As(err, &e) {
		return ""
	}
	return e.full
}

// lock pins the goroutine to its thread and silences the thread's automatic
// error printing; unlock must follow.
func lock() {
	runtime.LockOSThread()
	C.h5i_quiet()
}

func unlock() { runtime.UnlockOSThread() }

// lastError returns the thread's HDF5 error stack as an error for op and
// clears the stack. It must run on the thread of the failed call.
func lastError(op string) error {
	buf, full := make([]C.char, 1024), make([]C.char, 4096)
	errno := C.h5i_error(&buf[0], C.size_t(len(buf)), &full[0], C.size_t(len(full)))
	return &h5Error{op: op, stack: C.GoString(&buf[0]), full: C.GoString(&full[0]), errno: syscall.Errno(errno)}
}

func hsizes(v []uint64) []C.hsize_t {
	out := make([]C.hsize_t, len(v))
	for i, x := range v {
		out[i] = C.hsize_t(x)
	}
	return out
}

// closeID closes an identifier of any kind; closing 0 or a negative id is a
// no-op.
func closeID(id hid) error {
	if id <= 0 {
		return nil
	}
	lock()
	defer unlock()
	var r C.herr_t
	switch C.H5Iget_type(id) {
	case C.H5I_FILE:
		r = C.H5Fclose(id)
	case C.H5I_GROUP:
		r = C.H5Gclose(id)
	case C.H5I_DATASET:
		r = C.H5Dclose(id)
	case C.H5I_DATASPACE:
		r = C.H5Sclose(id)
	case C.H5I_DATATYPE:
		r = C.H5Tclose(id)
	case C.H5I_ATTR:
		r = C.H5Aclose(id)
	case C.H5I_GENPROP_LST:
		r = C.H5Pclose(id)
	default:
		r = C.H5Idec_ref(id)
	}
	if r < 0 {
		return lastError(fmt.Sprintf("close hdf5 object %d", int64(id)))
	}
	return nil
}

func createFile(name string, truncate bool) (hid, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	t := C.int(0)
	if truncate {
		t = 1
	}
	lock()
	defer unlock()
	f := C.h5i_create_file(cname, t)
	if f < 0 {
		return -1, lastError("create hdf5 file " + name)
	}
	return f, nil
}

func openFile(name string, swmr bool) (hid, error) {
	// A named pipe or a device blocks the library's open(2) or reads
	// forever: only a regular file is an HDF5 file.
	if fi, err := os.Stat(name); err == nil && !fi.Mode().IsRegular() {
		return -1, fmt.Errorf("open hdf5 file %s: not a regular file (mode %v)", name, fi.Mode())
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	s := C.int(0)
	if swmr {
		s = 1
	}
	lock()
	defer unlock()
	f := C.h5i_open_file(cname, s)
	if f < 0 {
		return -1, lastError("open hdf5 file " + name)
	}
	return f, nil
}

func startSWMR(f hid, name string) error {
	lock()
	defer unlock()
	if C.H5Fstart_swmr_write(f) < 0 {
		return lastError("start SWMR writing of " + name)
	}
	return nil
}

func flushFile(f hid, name string) error {
	lock()
	defer unlock()
	if C.H5Fflush(f, C.H5F_SCOPE_LOCAL) < 0 {
		return lastError("flush " + name)
	}
	return nil
}

// openObjects returns how many identifiers are open in file f, the file
// itself included.
func openObjects(f hid) int {
	lock()
	defer unlock()
	return int(C.H5Fget_obj_count(f, C.H5F_OBJ_ALL))
}

func createGroup(loc hid, name string) (hid, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	lock()
	defer unlock()
	g := C.H5Gcreate2(loc, cname, C.H5P_DEFAULT, C.H5P_DEFAULT, C.H5P_DEFAULT)
	if g < 0 {
		return -1, lastError("create group " + name)
	}
	return g, nil
}

// exists reports whether path names an object below loc; unlike
// H5Lexists alone, missing intermediate groups give false, not an error.
func exists(loc hid, path string) bool {
	lock()
	defer unlock()
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		prefix := path[:i]
		if prefix == "/" || prefix == "" {
			continue
		}
		cp := C.CString(prefix)
		ok := C.H5Lexists(loc, cp, C.H5P_DEFAULT)
		C.free(unsafe.Pointer(cp))
		if ok <= 0 {
			C.H5Eclear2(C.H5E_DEFAULT)
			return false
		}
	}
	return true
}

// writeAttr creates attribute name on obj with type t and dims (nil for a
// scalar) and writes buf to it.
func writeAttr(obj hid, name string, t hid, dims []uint64, buf unsafe.Pointer) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	lock()
	defer unlock()
	var space hid
	if dims == nil {
		space = C.H5Screate(C.H5S_SCALAR)
	} else {
		d := hsizes(dims)
		space = C.H5Screate_simple(C.int(len(d)), &d[0], nil)
	}
	if space < 0 {
		return lastError("create dataspace of attribute " + name)
	}
	defer C.H5Sclose(space)
	a := C.H5Acreate2(obj, cname, t, space, C.H5P_DEFAULT, C.H5P_DEFAULT)
	if a < 0 {
		return lastError("create attribute " + name)
	}
	defer C.H5Aclose(a)
	if C.H5Awrite(a, t, buf) < 0 {
		return lastError("write attribute " + name)
	}
	return nil
}

// setAttrStrings writes a variable-length UTF-8 string attribute: a scalar
// for one value when scalar is set, else a one-dimensional array.
func setAttrStrings(obj hid, name string, scalar bool, values ...string) error {
	ptrs := C.malloc(C.size_t(len(values)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(ptrs)
	cs := unsafe.Slice((**C.char)(ptrs), len(values))
	for i, v := range values {
		cs[i] = C.CString(v)
		defer C.free(unsafe.Pointer(cs[i]))
	}
	t, err := stringType(0)
	if err != nil {
		return err
	}
	defer closeID(t)
	var dims []uint64
	if !scalar {
		dims = []uint64{uint64(len(values))}
	}
	return writeAttr(obj, name, t, dims, ptrs)
}

func setAttrString(obj hid, name, value string) error {
	return setAttrStrings(obj, name, true, value)
}

func setAttrInt32(obj hid, name string, v int32) error {
	return writeAttr(obj, name, kindI32.id(), nil, unsafe.Pointer(&v))
}

func stringType(size int) (hid, error) {
	lock()
	defer unlock()
	t := C.h5i_string_type(C.size_t(size))
	if t < 0 {
		return -1, lastError("create string type")
	}
	return t, nil
}

// readAttrStrings reads a string attribute of any string type and shape.
func readAttrStrings(obj hid, name string) ([]string, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	lock()
	defer unlock()
	a := C.H5Aopen(obj, cname, C.H5P_DEFAULT)
	if a < 0 {
		return nil, lastError("open attribute " + name)
	}
	defer C.H5Aclose(a)
	ft := C.H5Aget_type(a)
	if ft < 0 {
		return nil, lastError("type of attribute " + name)
	}
	defer C.H5Tclose(ft)
	space := C.H5Aget_space(a)
	if space < 0 {
		return nil, lastError("dataspace of attribute " + name)
	}
	defer C.H5Sclose(space)
	n := int(C.H5Sget_simple_extent_npoints(space))
	if C.H5Tget_class(ft) != C.H5T_STRING || n < 0 {
		return nil, fmt.Errorf("attribute %s is not a string", name)
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]string, n)
	if C.H5Tis_variable_str(ft) > 0 {
		ptrs := make([]*C.char, n)
		if C.H5Aread(a, ft, unsafe.Pointer(&ptrs[0])) < 0 {
			return nil, lastError("read attribute " + name)
		}
		for i, p := range ptrs {
			out[i] = C.GoString(p)
		}
		C.H5Dvlen_reclaim(ft, space, C.H5P_DEFAULT, unsafe.Pointer(&ptrs[0]))
		return out, nil
	}
	size := int(C.H5Tget_size(ft))
	buf := make([]byte, size*n)
	if C.H5Aread(a, ft, unsafe.Pointer(&buf[0])) < 0 {
		return nil, lastError("read attribute " + name)
	}
	for i := range out {
		out[i] = cString(buf[i*size : (i+1)*size])
	}
	return out, nil
}

// cString returns b up to its first NUL byte.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// dcpl is a dataset creation property list under construction.
type dcpl struct {
	id hid
}

func newDCPL(chunk []uint64, k kind, fill unsafe.Pointer) (dcpl, error) {
	lock()
	defer unlock()
	p := C.h5i_create_dcpl()
	if p < 0 {
		return dcpl{}, lastError("create dataset creation property list")
	}
	if chunk != nil {
		c := hsizes(chunk)
		if C.H5Pset_chunk(p, C.int(len(c)), &c[0]) < 0 {
			C.H5Pclose(p)
			return dcpl{}, lastError(fmt.Sprintf("set chunk shape %v", chunk))
		}
	}
	if fill != nil {
		if C.H5Pset_fill_value(p, k.id(), fill) < 0 ||
			C.H5Pset_fill_time(p, C.H5D_FILL_TIME_IFSET) < 0 {
			C.H5Pclose(p)
			return dcpl{}, lastError("set fill value")
		}
	}
	return dcpl{p}, nil
}

func (p dcpl) close() { closeID(p.id) }

// setFilters appends the filters to the pipeline, each mandatory or
// optional as it says, with its cd_values as given.
func (p dcpl) setFilters(filters []compress.Filter) error {
	lock()
	defer unlock()
	for _, f := range filters {
		flags := C.uint(0)
		if f.Optional {
			flags = flagOptional
		}
		var vals *C.uint
		cv := make([]C.uint, len(f.Values))
		for i, v := range f.Values {
			cv[i] = C.uint(v)
		}
		if len(cv) > 0 {
			vals = &cv[0]
		}
		if C.H5Pset_filter(p.id, C.H5Z_filter_t(f.ID), flags, C.size_t(len(cv)), vals) < 0 {
			return lastError(fmt.Sprintf("add filter %d (%s)", f.ID, f.Name))
		}
	}
	return nil
}

// setVirtual adds one mapping of a virtual dataset: the hyperslab
// (vStart, block) of the virtual dataset, of extent vDims/vMax, takes the
// hyperslab (sStart, block) of dataset dset in file (". " for this file),
// whose extent is sDims/sMax. A block dimension of unlimited makes the
// mapping follow the source as it grows.
func (p dcpl) setVirtual(vDims, vMax, vStart []uint64, file, dset string, sDims, sMax, sStart, block []uint64) error {
	return p.setVirtualBlocks(vDims, vMax, vStart, block, file, dset, sDims, sMax, sStart, block)
}

// setVirtualBlocks is setVirtual with a block of its own on each side, so
// that a source of one rank can fill a slab of a virtual dataset of
// another (a module's (N) records as column k of an (N, M) view); both
// blocks must hold as many elements.
func (p dcpl) setVirtualBlocks(vDims, vMax, vStart, vBlock []uint64, file, dset string, sDims, sMax, sStart, sBlock []uint64) error {
	cfile, cdset := C.CString(file), C.CString(dset)
	defer C.free(unsafe.Pointer(cfile))
	defer C.free(unsafe.Pointer(cdset))
	op := fmt.Sprintf("map %s:%s%v+%v to virtual %v+%v", file, dset, sStart, sBlock, vStart, vBlock)
	lock()
	defer unlock()
	vs, err := selection(vDims, vMax, vStart, vBlock)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer C.H5Sclose(vs)
	ss, err := selection(sDims, sMax, sStart, sBlock)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer C.H5Sclose(ss)
	if C.H5Pset_virtual(p.id, vs, cfile, cdset, ss) < 0 {
		return lastError(op)
	}
	return nil
}

// selection returns a dataspace of extent dims/max with the hyperslab
// (start, block) selected. The caller holds the thread lock.
func selection(dims, max, start, block []uint64) (hid, error) {
	d, m, s, b := hsizes(dims), hsizes(max), hsizes(start), hsizes(block)
	space := C.H5Screate_simple(C.int(len(d)), &d[0], &m[0])
	if space < 0 {
		return -1, lastError("create dataspace")
	}
	one := make([]C.hsize_t, len(d))
	for i := range one {
		one[i] = 1
	}
	if C.H5Sselect_hyperslab(space, C.H5S_SELECT_SET, &s[0], &one[0], &one[0], &b[0]) < 0 {
		C.H5Sclose(space)
		return -1, lastError("select hyperslab")
	}
	return space, nil
}

// createDataset creates dataset name below loc of the given element type
// (a kind, or a datatype id when kind is 0) and extent, with the property
// list p (zero for defaults).
func createDataset(loc hid, name string, k kind, t hid, dims, max []uint64, p dcpl) (hid, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	lock()
	defer unlock()
	if k != 0 {
		t = k.id()
	}
	var space hid
	if dims == nil {
		space = C.H5Screate(C.H5S_SCALAR)
	} else {
		d, m := hsizes(dims), hsizes(max)
		space = C.H5Screate_simple(C.int(len(d)), &d[0], &m[0])
	}
	if space < 0 {
		return -1, lastError("create dataspace of " + name)
	}
	defer C.H5Sclose(space)
	pid := hid(C.H5P_DEFAULT)
	if p.id > 0 {
		pid = p.id
	}
	d := C.H5Dcreate2(loc, cname, t, space, C.H5P_DEFAULT, pid, C.H5P_DEFAULT)
	if d < 0 {
		return -1, lastError("create dataset " + name)
	}
	return d, nil
}

// withoutPlugins runs fn with the loading of filter plugins turned off, so
// that a plugin's set_local callback cannot rewrite cd_values that the
// caller states in full.
func withoutPlugins(fn func() error) error {
	lock()
	old := C.h5i_plugins(0)
	if old < 0 {
		err := lastError("turn off filter plugin loading")
		unlock()
		return err
	}
	unlock()
	err := fn()
	lock()
	C.h5i_plugins(old)
	unlock()
	return err
}

func openDataset(loc hid, path string) (hid, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	lock()
	defer unlock()
	d := C.H5Dopen2(loc, cpath, C.H5P_DEFAULT)
	if d < 0 {
		return -1, lastError("open dataset " + path)
	}
	return d, nil
}

func openGroup(loc hid, path string) (hid, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	lock()
	defer unlock()
	g := C.H5Gopen2(loc, cpath, C.H5P_DEFAULT)
	if g < 0 {
		return -1, lastError("open group " + path)
	}
	return g, nil
}

// writeAll writes the whole dataset from buf, elements of the given kind,
// or of datatype t when kind is 0.
func writeAll(d hid, name string, k kind, t hid, buf unsafe.Pointer) error {
	lock()
	defer unlock()
	if k != 0 {
		t = k.id()
	}
	if C.H5Dwrite(d, t, C.H5S_ALL, C.H5S_ALL, C.H5P_DEFAULT, buf) < 0 {
		return lastError("write " + name)
	}
	return nil
}

// readAll reads the whole dataset into buf as elements of the given kind.
func readAll(d hid, name string, k kind, buf unsafe.Pointer) error {
	lock()
	defer unlock()
	if C.H5Dread(d, k.id(), C.H5S_ALL, C.H5S_ALL, C.H5P_DEFAULT, buf) < 0 {
		return lastError("read " + name)
	}
	return nil
}

func setExtent(d hid, name string, dims []uint64) error {
	c := hsizes(dims)
	lock()
	defer unlock()
	if C.H5Dset_extent(d, &c[0]) < 0 {
		return lastError(fmt.Sprintf("set extent of %s to %v", name, dims))
	}
	return nil
}

// refresh makes a SWMR reader see what the writer flushed to dataset d.
func refresh(d hid, name string) error {
	lock()
	defer unlock()
	if C.H5Drefresh(d) < 0 {
		return lastError("refresh " + name)
	}
	return nil
}

// shape returns the current and maximum extent of dataset d.
func shape(d hid, name string) (dims, max []uint64, err error) {
	lock()
	defer unlock()
	space := C.H5Dget_space(d)
	if space < 0 {
		return nil, nil, lastError("dataspace of " + name)
	}
	defer C.H5Sclose(space)
	n := C.H5Sget_simple_extent_ndims(space)
	if n < 0 {
		return nil, nil, lastError("rank of " + name)
	}
	if n == 0 {
		return []uint64{}, []uint64{}, nil
	}
	cd, cm := make([]C.hsize_t, n), make([]C.hsize_t, n)
	if C.H5Sget_simple_extent_dims(space, &cd[0], &cm[0]) < 0 {
		return nil, nil, lastError("extent of " + name)
	}
	dims, max = make([]uint64, n), make([]uint64, n)
	for i := range cd {
		dims[i], max[i] = uint64(cd[i]), uint64(cm[i])
	}
	return dims, max, nil
}

// elemSize returns the size in bytes of dataset d's elements.
func elemSize(d hid, name string) (int, error) {
	lock()
	defer unlock()
	t := C.H5Dget_type(d)
	if t < 0 {
		return 0, lastError("type of " + name)
	}
	defer C.H5Tclose(t)
	return int(C.H5Tget_size(t)), nil
}

// filters returns dataset d's filter pipeline as stored in the file.
func filters(d hid, name string) ([]compress.Filter, error) {
	lock()
	defer unlock()
	p := C.H5Dget_create_plist(d)
	if p < 0 {
		return nil, lastError("creation properties of " + name)
	}
	defer C.H5Pclose(p)
	n := int(C.H5Pget_nfilters(p))
	if n < 0 {
		return nil, lastError("filters of " + name)
	}
	var out []compress.Filter
	for i := 0; i < n; i++ {
		var flags, config C.uint
		nv := C.size_t(maxCdValues)
		vals := make([]C.uint, maxCdValues)
		cname := make([]C.char, 256)
		id := C.H5Pget_filter2(p, C.uint(i), &flags, &nv, &vals[0], C.size_t(len(cname)), &cname[0], &config)
		if id < 0 {
			return nil, lastError(fmt.Sprintf("filter %d of %s", i, name))
		}
		if int(nv) > maxCdValues {
			return nil, fmt.Errorf("filter %d of %s has %d cd_values, more than %d", int(id), name, int(nv), maxCdValues)
		}
		f := compress.Filter{ID: int(id), Name: C.GoString(&cname[0]), Optional: flags&flagOptional != 0}
		for _, v := range vals[:nv] {
			f.Values = append(f.Values, uint32(v))
		}
		out = append(out, f)
	}
	return out, nil
}

func linkHard(loc hid, target, name string) error {
	ct, cn := C.CString(target), C.CString(name)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cn))
	lock()
	defer unlock()
	if C.H5Lcreate_hard(loc, ct, loc, cn, C.H5P_DEFAULT, C.H5P_DEFAULT) < 0 {
		return lastError(fmt.Sprintf("hard link %s to %s", name, target))
	}
	return nil
}

func linkSoft(loc hid, target, name string) error {
	ct, cn := C.CString(target), C.CString(name)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cn))
	lock()
	defer unlock()
	if C.H5Lcreate_soft(ct, loc, cn, C.H5P_DEFAULT, C.H5P_DEFAULT) < 0 {
		return lastError(fmt.Sprintf("soft link %s to %s", name, target))
	}
	return nil
}

// softLinkTarget returns the target path of soft link name, or "" when
// name is not a soft link.
func softLinkTarget(loc hid, name string) (string, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	lock()
	defer unlock()
	var info C.H5L_info_t
	if C.H5Lget_info(loc, cn, &info, C.H5P_DEFAULT) < 0 {
		return "", lastError("link info of " + name)
	}
	if info._type != C.H5L_TYPE_SOFT {
		return "", nil
	}
	size := *(*C.size_t)(unsafe.Pointer(&info.u))
	buf := make([]C.char, size+1)
	if C.H5Lget_val(loc, cn, unsafe.Pointer(&buf[0]), size+1, C.H5P_DEFAULT) < 0 {
		return "", lastError("link value of " + name)
	}
	return C.GoString(&buf[0]), nil
}

// chunkOffset is the element offset of a chunk of the frame stack.
type chunkOffset [3]C.hsize_t

// setFrame points o at the chunk of frame index i.
func (o *chunkOffset) setFrame(i int) { o[0] = C.hsize_t(i) }

// writeChunk stores data, already filtered (mask bit i set means filter i
// was skipped), as the chunk of d at off. It does not allocate unless it
// fails.
func writeChunk(d hid, off *chunkOffset, mask uint32, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("write chunk at %v: empty chunk", *off)
	}
	lock()
	defer unlock()
	if C.H5Dwrite_chunk(d, C.H5P_DEFAULT, C.uint32_t(mask), &off[0], C.size_t(len(data)), unsafe.Pointer(&data[0])) < 0 {
		return lastError(fmt.Sprintf("write chunk at %v", *off))
	}
	return nil
}

// slowLookups counts chunk lookups that walked the whole chunk index
// (H5Dget_chunk_info_by_coord), which readChunk does only where the direct
// lookup failed for a reason other than a chunk never written. Tests read
// it to prove that reading every chunk stays linear in the frames.
var slowLookups atomic.Int64

// readChunk appends the stored bytes of the chunk of d at off to dst and
// returns them with the chunk's filter mask; ok is false when the chunk was
// never written.
//
// The chunk is found by a direct lookup in the chunk index
// (H5Dget_chunk_storage_size, O(log n) or better), not by
// H5Dget_chunk_info_by_coord, which in HDF5 1.10 walks the whole index on
// every call and made reading every chunk of a file quadratic.
func readChunk(d hid, off *chunkOffset, dst []byte) (data []byte, mask uint32, ok bool, err error) {
	lock()
	defer unlock()
	var size C.hsize_t
	switch C.h5i_chunk_size(d, &off[0], &size) {
	case 0:
		return dst, 0, false, nil
	case -1:
		// Not the "never written" answer: ask the slow way, which tells a
		// missing chunk from a broken index.
		C.H5Eclear2(C.H5E_DEFAULT)
		slowLookups.Add(1)
		var (
			addr   C.haddr_t
			filter C.uint
		)
		if C.H5Dget_chunk_info_by_coord(d, &off[0], &filter, &addr, &size) < 0 {
			return dst, 0, false, lastError(fmt.Sprintf("look up chunk at %v", *off))
		}
		if uint64(addr) == ^uint64(0) || size == 0 {
			return dst, 0, false, nil
		}
	}
	n := len(dst)
	if cap(dst)-n < int(size) {
		grown := make([]byte, n, n+int(size))
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:n+int(size)]
	var m C.uint32_t
	if C.H5Dread_chunk(d, C.H5P_DEFAULT, &off[0], &m, unsafe.Pointer(&dst[n])) < 0 {
		return dst[:n], 0, false, lastError(fmt.Sprintf("read chunk at %v", *off))
	}
	return dst, uint32(m), true, nil
}

// libverBounds returns the library version bounds (H5F_libver_t values)
// file f was opened or created with.
func libverBounds(f hid) (low, high int, err error) {
	lock()
	defer unlock()
	var lo, hi C.int
	if C.h5i_libver_bounds(f, &lo, &hi) < 0 {
		return 0, 0, lastError("library version bounds")
	}
	return int(lo), int(hi), nil
}

// libverV110 is H5F_LIBVER_V110, the file format of HDF5 1.10.
const libverV110 = C.H5F_LIBVER_V110

// clearStatus clears the status flags that a writer left in the superblock
// of file name (what h5clear -s does), so that readers other than SWMR
// readers open it.
func clearStatus(name string) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	lock()
	defer unlock()
	if C.h5i_open_clear_status(cname) < 0 {
		return lastError("clear the status flags of " + name)
	}
	return nil
}

// openObjectsAll returns how many HDF5 identifiers of any file are open in
// the process, files included.
func openObjectsAll() int {
	lock()
	defer unlock()
	return int(C.H5Fget_obj_count(C.H5F_OBJ_ALL, C.H5F_OBJ_ALL))
}

// storageSize returns the bytes dataset d's chunks take in the file.
func storageSize(d hid) int64 {
	lock()
	defer unlock()
	return int64(C.H5Dget_storage_size(d))
}

// boolType returns a new boolean type, as h5py writes and reads one.
func boolType() (hid, error) {
	lock()
	defer unlock()
	t := C.h5i_bool_type()
	if t < 0 {
		return -1, lastError("create boolean type")
	}
	return t, nil
}

// linkNames returns the names of the links in group g, in name order.
func linkNames(g hid, name string) ([]string, error) {
	dot := C.CString(".")
	defer C.free(unsafe.Pointer(dot))
	lock()
	defer unlock()
	var info C.H5G_info_t
	if C.H5Gget_info(g, &info) < 0 {
		return nil, lastError("list group " + name)
	}
	names := make([]string, 0, int(info.nlinks))
	for i := range C.hsize_t(info.nlinks) {
		n := C.H5Lget_name_by_idx(g, dot, C.H5_INDEX_NAME, C.H5_ITER_INC, i, nil, 0, C.H5P_DEFAULT)
		if n < 0 {
			return nil, lastError("list group " + name)
		}
		buf := make([]byte, n+1)
		if C.H5Lget_name_by_idx(g, dot, C.H5_INDEX_NAME, C.H5_ITER_INC, i, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(n+1), C.H5P_DEFAULT) < 0 {
			return nil, lastError("list group " + name)
		}
		names = append(names, cString(buf))
	}
	return names, nil
}

// isGroup reports whether name in loc is a group.
func isGroup(loc hid, name string) (bool, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	lock()
	defer unlock()
	o := C.H5Oopen(loc, cname, C.H5P_DEFAULT)
	if o < 0 {
		return false, lastError("open " + name)
	}
	defer C.H5Oclose(o)
	return C.H5Iget_type(o) == C.H5I_GROUP, nil
}

// readValue reads the scalar dataset name in loc as the Go value of its
// type: a string, an int64 (a uint64 above int64's range), a float64, or
// a bool (h5py's enumeration of FALSE and TRUE, or a uint8, as files of
// older versions kept booleans).
func readValue(loc hid, name string) (any, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	lock()
	defer unlock()
	d := C.H5Dopen2(loc, cname, C.H5P_DEFAULT)
	if d < 0 {
		return nil, lastError("open dataset " + name)
	}
	defer C.H5Dclose(d)
	space := C.H5Dget_space(d)
	if space < 0 {
		return nil, lastError("dataspace of " + name)
	}
	defer C.H5Sclose(space)
	if C.H5Sget_simple_extent_ndims(space) != 0 {
		return nil, fmt.Errorf("dataset %s is not a scalar", name)
	}
	ft := C.H5Dget_type(d)
	if ft < 0 {
		return nil, lastError("type of " + name)
	}
	defer C.H5Tclose(ft)
	read := func(mt hid, buf unsafe.Pointer) error {
		if C.H5Dread(d, mt, C.H5S_ALL, C.H5S_ALL, C.H5P_DEFAULT, buf) < 0 {
			return lastError("read " + name)
		}
		return nil
	}
	switch C.H5Tget_class(ft) {
	case C.H5T_STRING:
		if C.H5Tis_variable_str(ft) > 0 {
			var p *C.char
			if err := read(ft, unsafe.Pointer(&p)); err != nil {
				return nil, err
			}
			s := C.GoString(p)
			C.H5Dvlen_reclaim(ft, space, C.H5P_DEFAULT, unsafe.Pointer(&p))
			return s, nil
		}
		buf := make([]byte, int(C.H5Tget_size(ft))+1)
		err := read(ft, unsafe.Pointer(&buf[0]))
		return cString(buf), err
	case C.H5T_INTEGER:
		if C.H5Tget_sign(ft) == C.H5T_SGN_NONE {
			if C.H5Tget_size(ft) == 1 {
				var u uint8
				err := read(C.h5i_type(C.H5I_U8), unsafe.Pointer(&u))
				return u != 0, err
			}
			var u uint64
			if err := read(C.h5i_type(C.H5I_U64), unsafe.Pointer(&u)); err != nil {
				return nil, err
			}
			if u > math.MaxInt64 {
				return u, nil
			}
			return int64(u), nil
		}
		var i int64
		err := read(C.h5i_type(C.H5I_I64), unsafe.Pointer(&i))
		return i, err
	case C.H5T_FLOAT:
		var f float64
		err := read(C.h5i_type(C.H5I_F64), unsafe.Pointer(&f))
		return f, err
	case C.H5T_ENUM:
		bt := C.h5i_bool_type()
		if bt < 0 {
			return nil, lastError("create boolean type")
		}
		defer C.H5Tclose(bt)
		var v int8
		if err := read(bt, unsafe.Pointer(&v)); err != nil {
			return nil, fmt.Errorf("dataset %s: an enumeration other than a boolean: %w", name, err)
		}
		return v != 0, nil
	}
	return nil, fmt.Errorf("dataset %s: neither a string, a number nor a boolean", name)
}

// pinnedFrames returns, of virtual dataset d, one frame past the frame
// that its mapping of dset in this file (".") covers, and false where it
// has no such mapping.
func pinnedFrames(d hid, dset string) (int, bool, error) {
	lock()
	defer unlock()
	p := C.H5Dget_create_plist(d)
	if p < 0 {
		return 0, false, lastError("creation properties of a virtual dataset")
	}
	defer C.H5Pclose(p)
	if C.H5Pget_layout(p) != C.H5D_VIRTUAL {
		return 0, false, nil
	}
	var count C.size_t
	if C.H5Pget_virtual_count(p, &count) < 0 {
		return 0, false, lastError("mappings of a virtual dataset")
	}
	buf := make([]C.char, len(dset)+2)
	for i := C.size_t(0); i < count; i++ {
		file := make([]C.char, 2)
		if C.H5Pget_virtual_filename(p, i, &file[0], 2) != 1 || file[0] != '.' {
			continue
		}
		n := C.H5Pget_virtual_dsetname(p, i, &buf[0], C.size_t(len(buf)))
		if n < 0 || int(n) != len(dset) || C.GoString(&buf[0]) != dset {
			continue
		}
		vs := C.H5Pget_virtual_vspace(p, i)
		if vs < 0 {
			return 0, false, lastError("selection of a virtual dataset's mapping")
		}
		rank := C.H5Sget_simple_extent_ndims(vs)
		if rank < 1 {
			C.H5Sclose(vs)
			return 0, false, lastError("rank of a virtual dataset's mapping")
		}
		start, end := make([]C.hsize_t, rank), make([]C.hsize_t, rank)
		r := C.H5Sget_select_bounds(vs, &start[0], &end[0])
		C.H5Sclose(vs)
		if r < 0 {
			return 0, false, lastError("bounds of a virtual dataset's mapping")
		}
		return int(end[0]) + 1, true, nil
	}
	return 0, false, nil
}
