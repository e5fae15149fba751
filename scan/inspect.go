package scan

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

// InspectReport is what Inspect finds in a file. Exactly one of File,
// Master and Capture is set, by the kind of file at Path.
type InspectReport struct {
	Path    string
	File    *FileSummary    // of a module's HDF5 file
	Master  *MasterSummary  // of a master file
	Capture *CaptureSummary // of a capture file
}

// FileSummary is what Inspect finds in a module's HDF5 file.
type FileSummary struct {
	Layout string // the layout's name: nxtomo, cxi, the registered layout whose stack is where the file's is, or other
	SWMR   bool   // the file was written for SWMR readers

	// The frame stack: Frames images of Height x Width pixels of
	// ElemSize bytes.
	Frames, Height, Width, ElemSize int

	// Codec names the codec of the registry that reads the file's
	// filter pipeline; it is empty when none does. Filters is that
	// pipeline, each filter named as the file or, where the file does
	// not, the codec names it.
	Codec   string
	Filters []compress.Filter

	StoredBytes  int64   // the chunks as stored
	DecodedBytes int64   // the whole stack, decoded
	Ratio        float64 // decoded bytes of the written frames per stored byte; 0 when nothing is stored

	Counts   frame.Counts // frames by recorded status
	Problems string       // the frames that are not ok, as frame.Problems lists them; "" when all are
	Plan     string       // the scan's plan, as plan.Recorded reads it; "" where the layout records none

	// Span is the detector time from the earliest to the latest timestamp
	// of the SpanFrames written frames; zero when fewer than two are.
	Span       time.Duration
	SpanFrames int
}

// MasterSummary is what Inspect finds in a master file.
type MasterSummary struct {
	Layout string // the layout's name, as the master records it

	// The virtual frame stack of the whole array.
	Frames, Height, Width, ElemSize int

	Modules []ModuleSummary // in the master's order
}

// ModuleSummary is what a master says of one module, and what the
// module's file records.
type ModuleSummary struct {
	writer.MasterModule
	Absent bool         // the module's file is absent: its frames read as the fill value
	Counts frame.Counts // the file's frames by recorded status, when it is present
}

// CaptureSummary is what Inspect finds in a capture file.
type CaptureSummary struct {
	Metadata capture.Metadata // who wrote the capture, when, with which profile
	Plan     *plan.Plan       // the plan the capture records; nil when it records none
	PlanErr  error            // why the recorded plan could not be read
	// Orientation is each chip's degrees as the capture records them,
	// where some chip is at 180 (what a replay turns them by where its
	// profile gives none); nil otherwise.
	Orientation []int
	Size        int64         // bytes of the file
	Tally       capture.Tally // the records read, per module

	// Err says why the capture could not be read to its end (wrapping
	// capture.ErrTruncated where it was cut short); the summary holds
	// what was read before. It is nil when the whole capture was read.
	Err error
}

// Inspect summarises the file at path: of an HDF5 file, its layout,
// stack, compression, frame statuses, plan and time span; of a master
// file, each module's place, file and frame statuses; of a capture file,
// who wrote it and when, its plan, and per module the frames it holds.
// The compression is named by the codec of stages that reads the file's
// filters.
//
// A capture that cannot be read to its end is summarised up to there,
// with the reason in its summary's Err, and the error is ErrIncomplete.
// The report is nil only when the error says the file could not be read.
func Inspect(stages *registry.Registry, path string) (*InspectReport, error) {
	if stages == nil {
		return nil, errNoRegistry
	}
	if _, err := os.Stat(path); err != nil {
		return nil, unreadable(err, "file unreadable", "an HDF5 file or a capture")
	}
	if capture.Sniff(path) {
		return inspectCapture(path)
	}
	r, err := writer.OpenPlain(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if r.Modules != nil {
		return inspectMaster(path, r)
	}
	records, err := r.Records()
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", path, err)
	}
	frameSize := int64(r.Height * r.Width * r.ElemSize)
	s := &FileSummary{
		Layout: layoutName(stages, r), SWMR: r.SWMR,
		Frames: r.Frames, Height: r.Height, Width: r.Width, ElemSize: r.ElemSize,
		Codec:        stages.CodecOf(r.Filters, r.ElemSize),
		Filters:      codecFilters(stages, r.Filters, r.ElemSize),
		StoredBytes:  r.StoredBytes(),
		DecodedBytes: int64(r.Frames) * frameSize,
		Counts:       frame.CountRecords(records),
		Problems:     frame.Problems(records),
	}
	if s.StoredBytes > 0 {
		s.Ratio = float64(int64(s.Counts.Written())*frameSize) / float64(s.StoredBytes)
	}
	if s.Plan, err = recordedPlan(r); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", path, err)
	}
	s.Span, s.SpanFrames = timeSpan(records)
	return &InspectReport{Path: path, File: s}, nil
}

// layoutName returns the name of r's layout: h5ingest's own as the reader
// knows them, and for another (writer.LayoutOther) the one registered
// layout whose frame stack is where the file's is. The files record no
// layout's name, so a file whose stack is where no registered layout, or
// where several, put theirs stays writer.LayoutOther.
func layoutName(stages *registry.Registry, r *writer.Reader) string {
	if r.Layout != writer.LayoutOther {
		return r.Layout
	}
	found := ""
	for _, name := range stages.Names().Layouts {
		l, ok := stages.Layout(name)
		if !ok || l.New == nil || name == writer.LayoutNXtomo || name == writer.LayoutCXI {
			continue
		}
		if l.New().StackPath() == r.StackPath() {
			if found != "" {
				return writer.LayoutOther
			}
			found = name
		}
	}
	return cmp.Or(found, writer.LayoutOther)
}

// inspectMaster summarises a master file: the array, and for each module
// its place, its file and its frames' statuses as the master sees them.
func inspectMaster(path string, r *writer.Reader) (*InspectReport, error) {
	s := &MasterSummary{Layout: r.Layout, Frames: r.Frames, Height: r.Height, Width: r.Width, ElemSize: r.ElemSize}
	for _, m := range r.Modules {
		ms := ModuleSummary{MasterModule: m}
		if !fileExists(filepath.Join(filepath.Dir(path), m.File)) {
			ms.Absent = true
		} else {
			recs, err := r.ModuleRecords(m.ID)
			if err != nil {
				return nil, fmt.Errorf("inspect %s: %w", path, err)
			}
			ms.Counts = frame.CountRecords(recs)
		}
		s.Modules = append(s.Modules, ms)
	}
	return &InspectReport{Path: path, Master: s}, nil
}

// codecFilters returns a filter pipeline with each filter that the file
// stores without its name (a plugin's that libhdf5 did not load) named as
// the codec of stages that reads the pipeline names it.
func codecFilters(stages *registry.Registry, filters []compress.Filter, elemSize int) []compress.Filter {
	filters = slices.Clone(filters)
	c, err := stages.ReadCodec(filters, elemSize)
	if err != nil {
		return filters
	}
	own := c.Filters()
	for i := range filters {
		if filters[i].Name == "" && i < len(own) && own[i].ID == filters[i].ID {
			filters[i].Name = own[i].Name
		}
	}
	return filters
}

// recordedPlan returns what the image keys and angles say about the scan,
// where the file's layout records them, and "" where it does not.
func recordedPlan(r *writer.Reader) (string, error) {
	keys, err := r.ImageKey()
	if err != nil || keys == nil {
		return "", err
	}
	angles, err := r.RotationAngle()
	if err != nil {
		return "", err
	}
	return plan.Recorded(keys, angles), nil
}

// timeSpan returns the detector time the written frames of records span,
// and how many they are; a zero span when fewer than two are written.
func timeSpan(records []frame.Record) (time.Duration, int) {
	var lo, hi uint64
	n := 0
	for _, rec := range records {
		if !frame.Written(rec.Status) {
			continue
		}
		if n == 0 {
			lo, hi = rec.Timestamp, rec.Timestamp
		}
		lo, hi = min(lo, rec.Timestamp), max(hi, rec.Timestamp)
		n++
	}
	if n < 2 {
		return 0, n
	}
	return time.Duration(hi - lo), n
}

// inspectCapture summarises a capture file: who wrote it and when, the
// plan it records, and per module the frames it holds, their numbers and
// formats. A capture that cannot be read to its end is summarised up to
// there, with the reason, and ErrIncomplete.
func inspectCapture(path string) (*InspectReport, error) {
	r, err := capture.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	s := &CaptureSummary{Metadata: r.Metadata()}
	if p, ok, err := CapturePlan(s.Metadata); err != nil {
		s.PlanErr = err
	} else if ok {
		s.Plan = &p
	}
	if deg, ok, err := captureOrientation(s.Metadata); err == nil && ok && slices.Contains(deg, 180) {
		s.Orientation = deg
	}
	s.Tally, s.Err = r.Tally()
	if info, err := os.Stat(path); err == nil {
		s.Size = info.Size()
	}
	rep := &InspectReport{Path: path, Capture: s}
	if s.Err != nil {
		return rep, ErrIncomplete
	}
	return rep, nil
}
