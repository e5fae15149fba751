package main

import (
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/preview"
	"h5ingest/scan"
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
	if isCapture(path) {
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

	written := 0
	var byStatus [4]int
	for _, rec := range records {
		if int(rec.Status) < len(byStatus) {
			byStatus[rec.Status]++
		}
		if rec.Status == frame.StatusOK || rec.Status == frame.StatusCRCMismatch {
			written++
		}
	}
	stored := r.StoredBytes()
	ratio := 0.0
	if stored > 0 {
		ratio = float64(int64(written)*int64(r.Height*r.Width*r.ElemSize)) / float64(stored)
	}
	fmt.Fprintf(out, "  compression   %s; %s stored, ratio %.2f\n", describeFilters(r.Filters), scan.FormatBytes(stored), ratio)
	fmt.Fprintf(out, "  frames        ok %d, missing %d, crc mismatch %d, rejected %d\n",
		byStatus[frame.StatusOK], byStatus[frame.StatusMissing], byStatus[frame.StatusCRCMismatch], byStatus[frame.StatusRejected])
	if list := framesWith(records, func(s uint8) bool { return s != frame.StatusOK }); list != "" {
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
		var byStatus [4]int
		for _, rec := range recs {
			if int(rec.Status) < len(byStatus) {
				byStatus[rec.Status]++
			}
		}
		fmt.Fprintf(out, "  module %-6d at (%d, %d), %dx%d, %s: ok %d, missing %d, crc mismatch %d, rejected %d\n",
			m.ID, m.Y, m.X, m.Height, m.Width, m.File, byStatus[frame.StatusOK], byStatus[frame.StatusMissing],
			byStatus[frame.StatusCRCMismatch], byStatus[frame.StatusRejected])
	}
	return nil
}

// describeFilters names a filter pipeline with its ids and stored values.
func describeFilters(filters []compress.Filter) string {
	if len(filters) == 0 {
		return "none"
	}
	var parts []string
	for _, f := range filters {
		vals := make([]string, len(f.Values))
		for i, v := range f.Values {
			vals[i] = fmt.Sprint(v)
		}
		name := f.Name
		if name == "" {
			name = compress.FilterName(f.ID)
		}
		parts = append(parts, fmt.Sprintf("%s (filter %d: %s)", name, f.ID, strings.Join(vals, " ")))
	}
	return strings.Join(parts, " then ")
}

// framesWith lists the frames whose status matches by status, the frame
// numbers labelled as such, e.g. "missing frames 3, 12-14; crc mismatch
// frame 17"; long lists are cut.
func framesWith(records []frame.Record, match func(uint8) bool) string {
	runs := map[uint8][]string{} // by status: runs of frame numbers
	var order []uint8
	count := map[uint8]int{}
	for i := 0; i < len(records); {
		s := records[i].Status
		if !match(s) {
			i++
			continue
		}
		j := i
		for j+1 < len(records) && records[j+1].Status == s {
			j++
		}
		if _, seen := runs[s]; !seen {
			order = append(order, s)
		}
		if i == j {
			runs[s] = append(runs[s], strconv.Itoa(i))
		} else {
			runs[s] = append(runs[s], fmt.Sprintf("%d-%d", i, j))
		}
		count[s] += j - i + 1
		i = j + 1
	}
	slices.Sort(order)
	const most = 12
	var parts []string
	for _, s := range order {
		label := "frames"
		if count[s] == 1 {
			label = "frame"
		}
		list := runs[s]
		text := strings.Join(list[:min(len(list), most)], ", ")
		if len(list) > most {
			text += fmt.Sprintf(", … (%d more runs)", len(list)-most)
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", scan.StatusName(s), label, text))
	}
	return strings.Join(parts, "; ")
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
	var count [4]int
	lo, hi := 0.0, 0.0
	first := true
	for i, k := range keys {
		if k >= 0 && int(k) < len(count) {
			count[k]++
		}
		if k == plan.Projection && i < len(angles) {
			if first || angles[i] < lo {
				lo = angles[i]
			}
			if first || angles[i] > hi {
				hi = angles[i]
			}
			first = false
		}
	}
	angle := fmt.Sprintf("at %g to %g degrees", lo, hi)
	if lo == hi && count[plan.Projection] > 1 {
		angle = fmt.Sprintf("all at %g degrees (no rotation recorded)", lo)
	}
	fmt.Fprintf(out, "  plan          %d darks, %d flats, %d projections %s\n",
		count[plan.DarkField], count[plan.FlatField], count[plan.Projection], angle)
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
