package cli

import (
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"

	"github.com/spf13/cobra"

	"h5ingest/preview"
	"h5ingest/registry"
	"h5ingest/scan"
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
			return scan.Inspect(cmd.OutOrStdout(), stages, args[0])
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
	fr, err := scan.ReadImage(notes, stages, path, n)
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
