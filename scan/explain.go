package scan

import (
	"errors"
	"io/fs"
	"syscall"

	"h5ingest/receive"
	"h5ingest/writer"
)

// An OperatorError is a failure an operator can meet and mend (a full
// disk, a directory gone, a port taken, a silent detector), said in one
// line: what happened, the error with its names, and what to do.
type OperatorError struct {
	Kind   string // what happened, in a few words: "disk full"
	Remedy string // what to do about it
	Err    error  // the failure, with its paths and addresses
}

// Error returns "KIND: ERR; REMEDY".
func (e *OperatorError) Error() string { return e.Kind + ": " + e.Err.Error() + "; " + e.Remedy }

// Unwrap returns the failure explained.
func (e *OperatorError) Unwrap() error { return e.Err }

// causes are the failures an operator can mend, by the system error (or
// the error) that marks each, first match first.
var causes = []struct {
	is           error
	kind, remedy string
}{
	{syscall.ENOSPC, "disk full", "free space on the output directory's file system, or write the next scans to another (output.directory)"},
	{syscall.EDQUOT, "disk quota exceeded", "raise the quota of the service's user on the output directory's file system, or free space under it"},
	{syscall.EFBIG, "file too large", "raise the process's file size limit (ulimit -f; LimitFSIZE= in the unit), or split the scan"},
	{syscall.EROFS, "read-only file system", "remount the output directory's file system read-write, or write to another directory"},
	{syscall.EACCES, "permission denied", "let the user h5ingest runs as write the output directory (its owner, group or mode), or write to another"},
	{syscall.EPERM, "permission denied", "let the user h5ingest runs as write the output directory (its owner, group or mode), or write to another"},
	{syscall.ENOENT, "directory gone", "create the output directory again (serve --create-dirs makes a request's), or write to another"},
	{syscall.ENOTDIR, "directory gone", "the output directory's path leads through a file: give a directory"},
	{syscall.EIO, "input/output error", "the disk or its mount failed: check the kernel's messages (dmesg) and the mount"},
	{syscall.EADDRINUSE, "port taken", "another process listens on the detector's port: stop it (ss -ltnp names it), or give another (source.port)"},
	{receive.ErrNoSender, "detector silent", "no sender connected within source.connect_timeout: check that the detector is on, sends to this host and port (source.port), and that the network and firewall let it through"},
}

// Explain returns err as an *OperatorError where it is a failure an
// operator can mend, naming its cause and what to do; else err as it is.
// nil stays nil.
func Explain(err error) error {
	var done *OperatorError
	if err == nil || errors.As(err, &done) {
		return err
	}
	for _, c := range causes {
		if errors.Is(err, c.is) {
			return &OperatorError{Kind: c.kind, Remedy: c.remedy, Err: err}
		}
	}
	return err
}

// unreadable returns err, a failure to open an input file (a capture, a
// file to inspect or verify), as an *OperatorError where the file system
// refused it: an input missing or not readable is no output directory
// gone or unwritable, as Explain would take it. kind says what happened
// ("file unreadable"), files the files the command reads ("an HDF5
// file").
func unreadable(err error, kind, files string) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err
	}
	return &OperatorError{Kind: kind, Remedy: "give the path of " + files + " that the user h5ingest runs as may read", Err: err}
}

// ExplainAt is Explain for a failure of a scan writing in dir: where an
// HDF5 failure names no system error (its stack may not), the file system
// of dir says what is wrong with it, if anything: gone, read-only or full.
func ExplainAt(err error, dir string) error {
	if x := Explain(err); x != err || err == nil || dir == "" || writer.Detail(err) == "" {
		return x
	}
	var st syscall.Statfs_t
	var cause error
	switch serr := syscall.Statfs(dir, &st); {
	case serr != nil:
		cause = serr
	case st.Flags&stReadOnly != 0:
		cause = syscall.EROFS
	case st.Bavail == 0:
		cause = syscall.ENOSPC
	default:
		return err
	}
	x := Explain(cause)
	if oe, ok := x.(*OperatorError); ok {
		oe.Err = err
		return oe
	}
	return err
}

// stReadOnly is ST_RDONLY of statfs's flags: the file system is mounted
// read-only.
const stReadOnly = 1
