package scan

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

// Inspect writes a summary of the file at path to out: of an HDF5 file,
// its layout, stack, compression, frame statuses, plan and time span; of
// a master file, each module's place, file and frame statuses; of a
// capture file, who wrote it and when, its plan, and per module the
// frames it holds. A capture that cannot be read to its end is summarised
// up to there, with the reason, and ErrIncomplete. The compression is
// named by the codec of stages that reads the file's filters.
func Inspect(out io.Writer, stages *registry.Registry, path string) error {
	if stages == nil {
		return errNoRegistry
	}
	if capture.Sniff(path) {
		return inspectCapture(out, path)
	}
	r, err := writer.OpenPlain(path)
	if err != nil {
		return err
	}
	defer r.Close()
	if r.Modules != nil {
		return inspectMaster(out, path, r)
	}
	records, err := r.Records()
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	dtype := fmt.Sprintf("uint%d", 8*r.ElemSize)
	decoded := int64(r.Frames) * int64(r.Height*r.Width*r.ElemSize)
	fmt.Fprintf(out, "%s\n", path)
	fmt.Fprintf(out, "  layout        %s%s\n", r.Layout, map[bool]string{true: " (SWMR file)"}[r.SWMR])
	fmt.Fprintf(out, "  stack         %d x %d x %d %s, %s decoded\n", r.Frames, r.Height, r.Width, dtype, FormatBytes(decoded))

	counts := frame.CountRecords(records)
	stored := r.StoredBytes()
	ratio := 0.0
	if stored > 0 {
		ratio = float64(int64(counts.Written())*int64(r.Height*r.Width*r.ElemSize)) / float64(stored)
	}
	fmt.Fprintf(out, "  compression   %s; %s stored, ratio %.2f\n", describeCodec(stages, r.Filters, r.ElemSize), FormatBytes(stored), ratio)
	fmt.Fprintf(out, "  frames        %v\n", counts)
	if list := frame.Problems(records); list != "" {
		fmt.Fprintf(out, "  problems      %s\n", list)
	}
	if err := printPlan(out, r); err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	printTimeSpan(out, records)
	return nil
}

// inspectMaster summarises a master file: the array, and for each module
// its place, its file and its frames' statuses as the master sees them.
func inspectMaster(out io.Writer, path string, r *writer.Reader) error {
	fmt.Fprintf(out, "%s\n", path)
	fmt.Fprintf(out, "  layout        %s, master of %d modules\n", r.Layout, len(r.Modules))
	fmt.Fprintf(out, "  stack         %d x %d x %d uint%d (virtual)\n", r.Frames, r.Height, r.Width, 8*r.ElemSize)
	for _, m := range r.Modules {
		file := filepath.Join(filepath.Dir(path), m.File)
		if !fileExists(file) {
			fmt.Fprintf(out, "  module %-6d at (%d, %d), %dx%d, %s: file absent (its frames read as the fill value)\n",
				m.ID, m.Y, m.X, m.Height, m.Width, m.File)
			continue
		}
		recs, err := r.ModuleRecords(m.ID)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", path, err)
		}
		fmt.Fprintf(out, "  module %-6d at (%d, %d), %dx%d, %s: %v\n",
			m.ID, m.Y, m.X, m.Height, m.Width, m.File, frame.CountRecords(recs))
	}
	return nil
}

// describeCodec names the codec of stages that reads a filter pipeline,
// and the pipeline with its ids and stored values: "bslz4: bitshuffle
// (filter 32008: 0 5 2 0 2)". A filter the file stores without its name
// (a plugin's that libhdf5 did not load) is named as the codec names it.
func describeCodec(stages *registry.Registry, filters []compress.Filter, elemSize int) string {
	name := stages.CodecOf(filters, elemSize)
	if name == "" {
		return "no codec of this h5ingest reads it: " + describeFilters(filters)
	}
	if c, err := stages.ReadCodec(filters, elemSize); err == nil {
		own := c.Filters()
		filters = slices.Clone(filters)
		for i := range filters {
			if filters[i].Name == "" && i < len(own) && own[i].ID == filters[i].ID {
				filters[i].Name = own[i].Name
			}
		}
	}
	return name + ": " + describeFilters(filters)
}

// describeFilters names a filter pipeline with its ids and stored values.
func describeFilters(filters []compress.Filter) string {
	if len(filters) == 0 {
		return "no filter"
	}
	parts := make([]string, len(filters))
	for i, f := range filters {
		parts[i] = f.String()
	}
	return strings.Join(parts, " then ")
}

// printPlan prints what the image keys and angles say about the scan,
// where the file's layout records them.
func printPlan(out io.Writer, r *writer.Reader) error {
	keys, err := r.ImageKey()
	if err != nil || keys == nil {
		return err
	}
	angles, err := r.RotationAngle()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  plan          %s\n", plan.Recorded(keys, angles))
	return nil
}

// printTimeSpan prints the detector time the written frames span and their
// mean rate.
func printTimeSpan(out io.Writer, records []frame.Record) {
	var stamps []uint64
	for _, rec := range records {
		if frame.Written(rec.Status) {
			stamps = append(stamps, rec.Timestamp)
		}
	}
	if len(stamps) < 2 {
		return
	}
	lo, hi := slices.Min(stamps), slices.Max(stamps)
	span := float64(hi-lo) / 1e9
	if span <= 0 {
		return
	}
	fmt.Fprintf(out, "  time span     %.3f s of detector time, mean %.1f frames/s\n", span, float64(len(stamps)-1)/span)
}

// printCaptureHeader prints who wrote the capture at path, when, and the
// plan it records.
func printCaptureHeader(out io.Writer, path string, meta capture.Metadata) {
	fmt.Fprintf(out, "%s\n", path)
	fmt.Fprintf(out, "  capture       written by %s at %s, profile %q\n", orUnknown(meta.Software), orUnknown(meta.Created), meta.Profile)
	if p, ok, err := CapturePlan(meta); err != nil {
		fmt.Fprintf(out, "  plan          unreadable: %v\n", err)
	} else if ok {
		fmt.Fprintf(out, "  plan          %v\n", p)
	} else {
		fmt.Fprintf(out, "  plan          none recorded\n")
	}
}

// inspectCapture summarises a capture file: who wrote it and when, the
// plan it records, and per module the frames it holds, their numbers and
// formats. A capture that cannot be read to its end is summarised up to
// there, with the reason, and ErrIncomplete.
func inspectCapture(out io.Writer, path string) error {
	r, err := capture.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	printCaptureHeader(out, path, r.Metadata())
	tally, readErr := r.Tally()
	size := int64(0)
	if info, err := os.Stat(path); err == nil {
		size = info.Size()
	}
	fmt.Fprintf(out, "  records       %s of %s, %s\n", plural(tally.Records, "frame"), plural(len(tally.Modules), "module"), FormatBytes(size))
	for _, id := range tally.IDs() {
		m := tally.Modules[id]
		line := fmt.Sprintf("  module %-6d %s, frame numbers %d to %d", id, plural(m.Records, "frame"), m.First, m.Last)
		if n := m.Copies(); n > 0 {
			line += fmt.Sprintf(" (%s of a number seen before)", plural(n, "copy"))
		}
		if n := m.Absent(); n > 0 {
			line += fmt.Sprintf(", %d of them absent", n)
		}
		for _, f := range m.Formats {
			line += fmt.Sprintf(", %v", f)
		}
		if m.BadHeaders > 0 {
			line += fmt.Sprintf(", %d with a header that does not match its payload", m.BadHeaders)
		}
		if span := float64(m.End-m.Start) / 1e9; span > 0 && m.Records > 1 {
			line += fmt.Sprintf(", %.3f s of detector time", span)
		}
		fmt.Fprintln(out, line)
	}
	if readErr != nil {
		what := "unreadable"
		if errors.Is(readErr, capture.ErrTruncated) {
			what = "cut short"
		}
		fmt.Fprintf(out, "  %-13s %v\n", what, readErr)
		return ErrIncomplete
	}
	return nil
}

// plural returns n and the noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case noun == "copy":
		return fmt.Sprintf("%d copies", n)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// orUnknown returns s, or "(not recorded)" where it is empty.
func orUnknown(s string) string {
	if s == "" {
		return "(not recorded)"
	}
	return s
}
