package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"h5ingest/registry"
	"h5ingest/scan"
)

func newVerifyCmd(stages *registry.Registry) *cobra.Command {
	var stall time.Duration
	cmd := &cobra.Command{
		Use:   "verify FILE.h5",
		Short: "Prove a file holds what the detector sent: every chunk against its recorded CRC-32C",
		Long: `verify reads every written chunk of the frame stack raw, decompresses it with
h5ingest's own codecs, recomputes the CRC-32C of the image and compares it with the
frame's data_crc32c record. It also checks that the layout is complete and that
the records agree with the chunks: a frame recorded as written has a chunk, a frame
recorded as missing or rejected has none.

A damaged file can make the HDF5 library stop answering; verify then gives up
after --stall-timeout without progress and fails, rather than waiting forever.

Exit status: 0 every frame is good; 3 the file is sound but some frames are
missing, corrupt or rejected, or it holds no frame; 1 a chunk or the layout is
bad, or the file could not be read.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return readInterruptibly(cmd, stall, func(ctx context.Context) error {
				var progress scan.VerifyProgress
				stop := startReport(verifyLine(&progress, time.Now()))
				rep, err := scan.VerifyCounting(ctx, stages, args[0], stall, &progress)
				stop()
				if rep != nil {
					printVerify(cmd.OutOrStdout(), rep)
				}
				return err
			})
		},
	}
	cmd.Flags().DurationVar(&stall, "stall-timeout", scan.DefaultVerifyStall, "give up when reading the file makes no progress for this long (a damaged file)")
	return cmd
}

// verifyLine returns what progress says of a verify begun at start, as
// a progress line.
func verifyLine(progress *scan.VerifyProgress, start time.Time) func(terminal bool) string {
	return func(terminal bool) string {
		read, total := progress.Frames()
		var fps float64
		if secs := time.Since(start).Seconds(); secs > 0 {
			fps = float64(read) / secs
		}
		return fmt.Sprintf("verify: frames %s read  %.0f frames/s", count(read, total, terminal), fps)
	}
}

// readInterruptibly runs read, a reading of a file that gives up after
// stall without progress, with a context that Ctrl-C and SIGTERM cancel:
// what verify and recover share. A stall that is not positive is a usage
// error.
func readInterruptibly(cmd *cobra.Command, stall time.Duration, read func(context.Context) error) error {
	if stall <= 0 {
		return scan.Usage(fmt.Errorf("--stall-timeout %v is not positive", stall))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return read(ctx)
}

// printVerify writes what verify found: a line per bad chunk, record or
// layout, and one summing up; of a master, each module file's lines, or
// why it could not be verified, then one for the master.
func printVerify(w io.Writer, rep *scan.VerifyReport) {
	if rep.Modules != nil {
		for _, m := range rep.Modules {
			if m.Report == nil {
				fmt.Fprintf(w, "BAD module %d: %v\n", m.ID, m.Err)
				continue
			}
			printVerify(w, m.Report)
		}
		fmt.Fprintf(w, "%s: master of %d modules\n", rep.Path, len(rep.Modules))
		return
	}
	for _, f := range rep.Bad {
		fmt.Fprintf(w, "BAD %v\n", f)
	}
	if n := len(rep.Unrecorded); n > 0 {
		fmt.Fprintf(w, "note: %d frames (first %d) have a chunk but no record, as a writer stopped mid-scan leaves them: counted as missing\n",
			n, rep.Unrecorded[0])
	}
	fmt.Fprintf(w, "%s: %d frames, %d chunks verified; %v\n", rep.Path, rep.Frames, rep.Checked, rep.Counts)
	if len(rep.Bad) == 0 && rep.Frames == 0 {
		fmt.Fprintf(w, "%s holds no frame\n", rep.Path)
	}
}
