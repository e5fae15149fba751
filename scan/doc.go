// Package scan runs acquisitions and replays as a beamline runs them: it
// opens a scan from a merged profile (one module or several), names its
// files, checks before the first frame that the scan can be written,
// moves the frames of any pipeline.Source into the files, and closes it
// with a result: the counts, the files written and whether every planned
// frame is good. The master file of a multi-module scan, the live stream,
// the status page and metrics, and the proof of a finished file (Verify)
// live here too.
//
// Every acquire, one module or several, receives through one detector
// session: it accepts each module's sender, checks its hello and runs the
// module's scan into its file. The scan service's runner (package serve)
// arms its scans as acquires.
//
// A command (package cli) or the scan service keeps only its flags, its
// terminal output and its exit statuses: errors wrapping
// ErrUsage are the profile's or the request's fault, ErrIncomplete means
// the file is complete but some frames are not good.
package scan

import "errors"

// ErrUsage is wrapped by errors that a profile key, a request or a
// command-line value caused: what a person must change before a scan can
// run.
var ErrUsage = errors.New("bad profile or request")

// ErrIncomplete is returned by a scan whose file is complete but some of
// whose frames are missing, corrupt or rejected, or whose source stopped
// early; the notes of its Result say why.
var ErrIncomplete = errors.New("scan incomplete: some frames are not good")

// usageErr is an error the user is to fix (ErrUsage).
type usageErr struct{ err error }

func (e *usageErr) Error() string   { return e.err.Error() }
func (e *usageErr) Unwrap() []error { return []error{e.err, ErrUsage} }

// Usage marks err as the user's to fix: errors.Is(Usage(err), ErrUsage)
// holds and its message is err's.
func Usage(err error) error { return &usageErr{err} }

// incompleteErr is an incomplete scan's error with its reason.
type incompleteErr struct{ err error }

func (e *incompleteErr) Error() string   { return e.err.Error() }
func (e *incompleteErr) Unwrap() []error { return []error{e.err, ErrIncomplete} }

// Incomplete marks err as the reason a scan is incomplete:
// errors.Is(Incomplete(err), ErrIncomplete) holds and its message is
// err's.
func Incomplete(err error) error { return &incompleteErr{err} }

// worse returns the worse of two scan results: any failure outranks
// ErrIncomplete, which outranks nil.
func worse(a, b error) error {
	rank := func(err error) int {
		switch {
		case err == nil:
			return 0
		case errors.Is(err, ErrIncomplete):
			return 1
		}
		return 2
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}
