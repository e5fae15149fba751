package scan

import (
	"strings"
	"time"

	"h5ingest/pipeline"
	"h5ingest/receive"
	"h5ingest/stream"
)

// A Note is a sentence a scan has for the person who runs it, beside its
// summary: a warning, what a scan does as it runs, or what became of
// some of its frames. Text is the sentence alone, without a program's
// name before it; Kind says which it is, for a program to tell them
// apart without reading the sentence.
type Note struct {
	Kind NoteKind
	Text string
}

// String returns the note's text.
func (n Note) String() string { return n.Text }

// A NoteKind says what a Note is about.
type NoteKind int

const (
	// Warning: something to know about a scan whose files are as its
	// summary says (a stream that did not end cleanly, a capture cut
	// short, a reader that cannot read the codec, little free space).
	Warning NoteKind = iota + 1
	// Info: what the scan does, said as it does it (a plan taken from a
	// capture).
	Info
	// Waiting: the scan waits for the detector; the text says where.
	Waiting
	// Interrupted: a stop request or a signal interrupts the scan: the
	// Stopper says so as each takes effect, and the summary of a module
	// it ended early, whose file holds the frames received before.
	Interrupted
	// SourceStopped: the source stopped early (a connection lost, a
	// capture that cannot be read on): the rest of the scan is missing.
	SourceStopped
	// Beyond: frames numbered beyond the scan were rejected and are in
	// no file.
	Beyond
	// NoFrame: no frame arrived and no plan gave a count.
	NoFrame
	// NeverConnected: a module's sender never connected; its frames are
	// recorded missing.
	NeverConnected
	// Refused: a module's sender connected after the stop and was
	// refused; its frames are recorded missing.
	Refused
	// Short: a module has fewer frames than the scan's longest; the
	// master shows the rest missing.
	Short
	// Dropped: frames of modules the profile does not list were dropped
	// (and, where a replay of one module wrote none, how to replay the
	// module its capture holds).
	Dropped
	// Failed: a part of the scan that does not hold its frames failed as
	// the scan ended (a processor stage, the report).
	Failed
)

var noteKinds = [...]string{Warning: "warning", Info: "info", Waiting: "waiting", Interrupted: "interrupted",
	SourceStopped: "source stopped", Beyond: "beyond the scan", NoFrame: "no frame", NeverConnected: "never connected",
	Refused: "refused", Short: "short", Dropped: "dropped", Failed: "failed"}

// String returns the kind's name: "warning", "never connected".
func (k NoteKind) String() string {
	if k > 0 && int(k) < len(noteKinds) {
		return noteKinds[k]
	}
	return "note"
}

// Result is what a scan did: each module's summary, the master file of a
// scan of several modules, and the notes about the scan as a whole.
// A scan that failed returns what it finished before it failed.
type Result struct {
	// Notes are about the scan as a whole (a module that never connected,
	// frames of modules the profile does not list, a --record capture cut
	// short), in the order they arose; those of a master that could not
	// be written are last.
	Notes   []Note
	Modules []Summary     // by the module's place in the scan's files, those that finished
	Master  *MasterResult // nil without a master file, or where none was written
}

// Summary is what the scan of one module did.
type Summary struct {
	Module int    // the module's id
	Path   string // its file: the final name, or the temporary one where the final could not be taken
	Frames int    // frames in the scan: the plan's, or those seen without a plan
	// Progress is the pipeline's final count of frames, bytes and time.
	Progress pipeline.Progress
	// Live is what went to the live stream; nil where the scan had none.
	Live *LiveResult
	// Series is what went to the series the processor stages sent on the
	// live stream beside the scan's own (flatfield's previews), in the
	// order declared; nil where there were none.
	Series []SeriesResult
	// Received is what the detector's connection took off the wire; nil
	// for a scan of another source (a replay).
	Received *receive.Stats
	// Stages are the stages' mean times; nil where the scan was not
	// observed (Observer).
	Stages *StageTimes
	// Report is the report page written after this scan, the observer's
	// last; "" for none.
	Report string
	// Notes are about this module: its warnings, and why it is
	// incomplete.
	Notes []Note
}

// LiveResult is what a scan sent to its live stream.
type LiveResult struct {
	stream.Stats
	// Ended reports whether the stream ended cleanly: its end of series
	// left for a consumer within the linger (a note says why not).
	Ended bool
}

// SeriesResult is what a processor stage's series on the live stream
// sent (pipeline.Scan.AddStream).
type SeriesResult struct {
	Name string // the series' name: the processor's
	LiveResult
}

// StageTimes are the mean times of a scan's stages.
type StageTimes struct {
	Decode   time.Duration // per batch of frames
	Compress time.Duration // per frame
	Write    time.Duration // per frame
}

// MasterResult is the master file of a scan of several modules.
type MasterResult struct {
	Path          string
	Modules       int // module files it shows
	Frames        int
	Height, Width int // of the detector's array
	// Notes are about the master and its modules: a module shorter than
	// the scan, a module file it could not take metadata from or that is
	// not there yet.
	Notes []Note
}

// ChecksError is the error of pre-scan checks that failed, with each
// failure: errors.Is(err, ErrChecks) holds.
type ChecksError struct{ Failures []error }

func (e *ChecksError) Error() string {
	msgs := make([]string, len(e.Failures))
	for i, f := range e.Failures {
		msgs[i] = f.Error()
	}
	return ErrChecks.Error() + ": " + strings.Join(msgs, "; ")
}

// Is reports whether target is ErrChecks.
func (e *ChecksError) Is(target error) bool { return target == ErrChecks }

// Unwrap returns the failures.
func (e *ChecksError) Unwrap() []error { return e.Failures }

// tell calls notify with n, where notify is set.
func tell(notify func(Note), n Note) {
	if notify != nil {
		notify(n)
	}
}
