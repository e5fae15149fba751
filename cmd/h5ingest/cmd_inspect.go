package main

import (
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/preview"
	"h5ingest/scan"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

func newInspectCmd() *cobra.Command {
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
				return renderPNG(cmd.ErrOrStderr(), args[0], pngFrame, output, maxSide)
			}
			if output != "" || cmd.Flags().Changed("max-side") {
				return scan.Usage(errors.New("-o and --max-side go with --png FRAME"))
			}
			return inspect(cmd.OutOrStdout(), args[0])
		},
	}
	cmd.Flags().IntVar(&pngFrame, "png", 0, "render this frame as a PNG picture (log scale, with a colour bar)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "PNG file to write, with --png")
	cmd.Flags().IntVar(&maxSide, "max-side", 0, "shrink the picture so its longer side is at most this many pixels (0: full size)")
	return cmd
}

func inspect(out io.Writer, path string) error {
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
	fmt.Fprintf(out, "  stack         %d x %d x %d %s, %s decoded\n", r.Frames, r.Height, r.Width, dtype, scan.FormatBytes(decoded))

	counts := frame.CountRecords(records)
	stored := r.StoredBytes()
	ratio := 0.0
	if stored > 0 {
		ratio = float64(int64(counts.Written())*int64(r.Height*r.Width*r.ElemSize)) / float64(stored)
	}
	fmt.Fprintf(out, "  compression   %s; %s stored, ratio %.2f\n", describeFilters(r.Filters), scan.FormatBytes(stored), ratio)
	fmt.Fprintf(out, "  frames        %v\n", counts)
	if list := frame.Problems(records); list != "" {
		fmt.Fprintf(out, "  problems      %s\n", list)
	}
	if r.Layout == writer.LayoutNXtomo {
		if err := printPlan(out, r); err != nil {
			return fmt.Errorf("inspect %s: %w", path, err)
		}
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
		if !exists(file) {
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

// describeFilters names a filter pipeline with its ids and stored values.
func describeFilters(filters []compress.Filter) string {
	if len(filters) == 0 {
		return "none"
	}
	parts := make([]string, len(filters))
	for i, f := range filters {
		parts[i] = f.String()
	}
	return strings.Join(parts, " then ")
}

// printPlan prints what the image keys and angles say about the scan.
func printPlan(out io.Writer, r *writer.Reader) error {
	keys, err := r.ImageKey()
	if err != nil {
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
		if rec.Status == frame.StatusOK || rec.Status == frame.StatusCRCMismatch {
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

// renderPNG writes frame n of the file as a picture; of a master file,
// the frame of the whole array, each module's image at its place. What the
// picture cannot show (a frame missing, rejected or received damaged, a
// module file absent) is said on notes, one line each.
func renderPNG(notes io.Writer, path string, n int, output string, maxSide int) error {
	fr, err := scan.ReadImage(notes, path, n)
	if err != nil {
		return err
	}
	pic, err := preview.Render(fr, preview.Options{MaxSide: maxSide, ColorBar: true})
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
