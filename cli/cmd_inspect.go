package cli

import (
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/preview"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/source/capture"
)

func newInspectCmd(stages *registry.Registry) *cobra.Command {
	var pngFrame int
	var output string
	var maxSide int
	cmd := &cobra.Command{
		Use:   "inspect FILE.h5 [--png FRAME -o FILE.png]",
		Short: "Summarise a file: layout, shape, compression, frame statuses, time span",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if maxSide < 0 {
				return scan.Usage(fmt.Errorf("--max-side %d: want a number of pixels, or 0 for full size", maxSide))
			}
			if cmd.Flags().Changed("png") {
				if output == "" {
					return scan.Usage(errors.New("--png needs -o FILE.png"))
				}
				return renderPNG(cmd.ErrOrStderr(), stages, args[0], pngFrame, output, maxSide)
			}
			if output != "" || cmd.Flags().Changed("max-side") {
				return scan.Usage(errors.New("-o and --max-side go with --png FRAME"))
			}
			rep, err := scan.Inspect(stages, args[0])
			if rep != nil {
				printInspect(cmd.OutOrStdout(), rep)
			}
			return err
		},
	}
	cmd.Flags().IntVar(&pngFrame, "png", 0, "render this frame as a PNG picture (log scale, with a colour bar)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "PNG file to write, with --png")
	cmd.Flags().IntVar(&maxSide, "max-side", 0, "shrink the picture so its longer side is at most this many pixels (0: full size)")
	return cmd
}

// renderPNG writes frame n of the file as a picture; of a master file,
// the frame of the whole array, each module's image at its place. What the
// picture cannot show (a frame missing, rejected or received damaged, a
// module file absent) is said on notes, one line each.
func renderPNG(notes io.Writer, stages *registry.Registry, path string, n int, output string, maxSide int) error {
	im, err := scan.ReadImage(stages, path, n)
	if fe := (*scan.FrameRangeError)(nil); errors.As(err, &fe) {
		return scan.Usage(fmt.Errorf("--png %d: the file has frames 0 to %d", n, fe.Frames-1))
	}
	if err != nil {
		return err
	}
	for _, note := range im.Notes {
		fmt.Fprintf(notes, "h5ingest: %s\n", imageNote(note))
	}
	pic, err := preview.Render(im.Frame, preview.Options{MaxSide: maxSide, ColorBar: true})
	if err != nil {
		return err
	}
	f, err := os.Create(output)
	if err != nil {
		return err
	}
	if err := png.Encode(f, pic); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", output, err)
	}
	return f.Close()
}

// imageNote says what a picture of an image cannot show, as note n of
// scan.ReadImage has it.
func imageNote(n scan.ImageNote) string {
	switch n.Kind {
	case scan.FrameNotWritten:
		return fmt.Sprintf("frame %d of %s is %s: it was never written, the picture shows the fill value 0", n.Frame, n.Path, frame.StatusName(n.Status))
	case scan.FrameDamaged:
		return fmt.Sprintf("frame %d of %s has a payload CRC mismatch: the picture shows it as received, possibly damaged", n.Frame, n.Path)
	case scan.ModuleFileAbsent:
		return fmt.Sprintf("module %d's file %s is absent: its pixels show the fill value 0", n.Module, n.Path)
	case scan.ModuleFileShort:
		return fmt.Sprintf("module %d's file %s has frames 0 to %d: its pixels show the fill value 0", n.Module, n.Path, n.Frames-1)
	}
	return fmt.Sprintf("frame %d of %s: some pixels do not show what the detector sent", n.Frame, n.Path)
}

// printInspect writes the summary of a file that inspect shows.
func printInspect(w io.Writer, rep *scan.InspectReport) {
	fmt.Fprintf(w, "%s\n", rep.Path)
	switch {
	case rep.File != nil:
		printFileSummary(w, rep.File)
	case rep.Master != nil:
		printMasterSummary(w, rep.Master)
	case rep.Capture != nil:
		printCaptureSummary(w, rep.Path, rep.Capture)
	}
}

// printFileSummary writes the summary lines of a module's file.
func printFileSummary(w io.Writer, s *scan.FileSummary) {
	fmt.Fprintf(w, "  layout        %s%s\n", s.Layout, map[bool]string{true: " (SWMR file)"}[s.SWMR])
	fmt.Fprintf(w, "  stack         %d x %d x %d uint%d, %s decoded\n", s.Frames, s.Height, s.Width, 8*s.ElemSize, scan.FormatBytes(s.DecodedBytes))
	codec := "no codec of this h5ingest reads it"
	if s.Codec != "" {
		codec = s.Codec
	}
	fmt.Fprintf(w, "  compression   %s: %s; %s stored, ratio %.2f\n", codec, describeFilters(s.Filters), scan.FormatBytes(s.StoredBytes), s.Ratio)
	fmt.Fprintf(w, "  frames        %v\n", s.Counts)
	if s.Problems != "" {
		fmt.Fprintf(w, "  problems      %s\n", s.Problems)
	}
	if s.Plan != "" {
		fmt.Fprintf(w, "  plan          %s\n", s.Plan)
	}
	if span := s.Span.Seconds(); span > 0 {
		fmt.Fprintf(w, "  time span     %.3f s of detector time, mean %.1f frames/s\n", span, float64(s.SpanFrames-1)/span)
	}
}

// describeFilters names a filter pipeline with its ids and stored values:
// "bitshuffle (filter 32008: 0 5 2 0 2)".
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

// printMasterSummary writes the summary lines of a master file: the array,
// and each module's place, file and frames.
func printMasterSummary(w io.Writer, s *scan.MasterSummary) {
	fmt.Fprintf(w, "  layout        %s, master of %d modules\n", s.Layout, len(s.Modules))
	fmt.Fprintf(w, "  stack         %d x %d x %d uint%d (virtual)\n", s.Frames, s.Height, s.Width, 8*s.ElemSize)
	for _, m := range s.Modules {
		what := m.Counts.String()
		if m.Absent {
			what = "file absent (its frames read as the fill value)"
		}
		fmt.Fprintf(w, "  module %-6d at (%d, %d), %dx%d, %s: %s\n", m.ID, m.Y, m.X, m.Height, m.Width, m.File, what)
	}
}

// printCaptureSummary writes the summary lines of the capture at path:
// who wrote it and when, its plan, the chips it records at 180 degrees,
// and per module the frames it holds; of a capture cut short, why.
func printCaptureSummary(w io.Writer, path string, s *scan.CaptureSummary) {
	meta := s.Metadata
	fmt.Fprintf(w, "  capture       written by %s at %s, profile %q\n", orUnknown(meta.Software), orUnknown(meta.Created), meta.Profile)
	switch {
	case s.PlanErr != nil:
		fmt.Fprintf(w, "  plan          unreadable: %v\n", s.PlanErr)
	case s.Plan != nil:
		fmt.Fprintf(w, "  plan          %v\n", *s.Plan)
	default:
		fmt.Fprintf(w, "  plan          none recorded\n")
	}
	if o := s.Orientation; o != nil {
		fmt.Fprintf(w, "  orientation   %d of %d chips at 180 degrees: %v\n", countOf(o, 180), len(o), o)
	}
	fmt.Fprintf(w, "  records       %s of %s, %s\n", plural(s.Tally.Records, "frame"), plural(len(s.Tally.Modules), "module"), scan.FormatBytes(s.Size))
	for _, id := range s.Tally.IDs() {
		m := s.Tally.Modules[id]
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
		fmt.Fprintln(w, line)
	}
	if s.Err != nil {
		what := "unreadable"
		if errors.Is(s.Err, capture.ErrTruncated) {
			what = "cut short"
		}
		fmt.Fprintf(w, "  %-13s %v\n", what, s.Err)
	}
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

// countOf returns how many elements of s are v.
func countOf(s []int, v int) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
