package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"h5ingest/registry"
	"h5ingest/scan"
)

func newRecoverCmd(stages *registry.Registry) *cobra.Command {
	var stall time.Duration
	cmd := &cobra.Command{
		Use:   "recover FILE.part",
		Short: "Finish the file of a scan whose writer was killed: clear its open-for-writing flags, give it its final name, verify it",
		Long: `recover takes the temporary file (.NAME.part) that a scan leaves when its writer was
killed, or its machine lost, before the end. It clears the flags that mark the file as
still open for writing (what h5clear -s does; until then only SWMR readers open it),
renames it to its final name NAME, and verifies it. The file holds every frame its
writer had flushed (at the profile's flush cadence); the rest are recorded missing.

FILE may also be the final name, when its temporary file exists. recover refuses a
file that a scan still writes, and a final name that exists. Before it renames anything it
opens the file read-only and checks its layout; a file that fails (empty, damaged
metadata) or a temporary name that is a symbolic link is left as it was.

Exit status: as verify's (3 when frames are missing, as after a killed scan); 1 when
the file could not be recovered (and then it keeps its temporary name, untouched).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return readInterruptibly(cmd, stall, func(ctx context.Context) error {
				rep, err := scan.Recover(ctx, stages, args[0], stall)
				if rep != nil {
					printRecover(cmd.OutOrStdout(), rep)
				}
				return err
			})
		},
	}
	cmd.Flags().DurationVar(&stall, "stall-timeout", scan.DefaultVerifyStall, "give up verifying when reading the file makes no progress for this long (a damaged file)")
	return cmd
}

// printRecover writes what recover did: the file it renamed, then what
// verify found in it.
func printRecover(w io.Writer, rep *scan.RecoverReport) {
	fmt.Fprintf(w, "recovered %s as %s\n", filepath.Base(rep.Temp), rep.Final)
	if rep.Verify != nil {
		printVerify(w, rep.Verify)
	}
}
