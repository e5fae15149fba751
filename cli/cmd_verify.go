package cli

import (
	"fmt"
	"h5ingest/registry"
	"h5ingest/scan"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
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
			if stall <= 0 {
				return scan.Usage(fmt.Errorf("--stall-timeout %v is not positive", stall))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return scan.Verify(ctx, cmd.OutOrStdout(), stages, args[0], stall)
		},
	}
	cmd.Flags().DurationVar(&stall, "stall-timeout", scan.DefaultVerifyStall, "give up when reading the file makes no progress for this long (a damaged file)")
	return cmd
}
