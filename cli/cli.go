// Package cli is the whole h5ingest command: its subcommands, flags,
// terminal output and exit statuses. Run takes the registry of the stages
// a profile may name, so that a facility's own build of the command is
// its stages registered beside h5ingest's and one call:
//
//	func main() {
//		stages := registry.New()
//		if err := stock.Register(stages); err != nil { ... }
//		if err := myfacility.Register(stages); err != nil { ... }
//		os.Exit(cli.Run(stages, os.Args[1:]))
//	}
//
// Each subcommand lives in a file of its own, cmd_<name>.go.
//
// Package cli is part of h5ingest's facility API; see docs/extending.md.
package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/stream"
	"h5ingest/version"
	"h5ingest/writer"
)

// Exit statuses shared by every subcommand. Errors wrapping scan.ErrUsage
// exit with exitUsage, those wrapping scan.ErrIncomplete with
// exitIncomplete.
const (
	exitOK         = 0 // every planned frame is good
	exitFailure    = 1 // no usable result
	exitUsage      = 2 // bad command line or profile
	exitIncomplete = 3 // the file is complete but some frames are missing, corrupt or rejected
)

// usageArgs makes the errors of an argument check usage errors.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return scan.Usage(err)
		}
		return nil
	}
}

// newRootCmd returns the command, its subcommands choosing stages from
// stages.
func newRootCmd(stages *registry.Registry) *cobra.Command {
	root := &cobra.Command{
		Use:           "h5ingest",
		Short:         "Move X-ray detector frames from the wire to chunked HDF5 files",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.SetVersionTemplate("h5ingest {{.Version}}\n")
	// With no Run of its own, cobra would print help for any word that is
	// not a subcommand and succeed.
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return scan.Usage(fmt.Errorf("unknown command %q (see h5ingest --help)", args[0]))
		}
		return cmd.Help()
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return scan.Usage(err) })
	root.AddCommand(
		newSimulateCmd(),
		newReplayCmd(stages),
		newVerifyCmd(stages),
		newInspectCmd(stages),
		newProfilesCmd(stages),
		newBenchCmd(stages),
		newSendCmd(), newAcquireCmd(stages),
		newMasterCmd(stages),
		newRecoverCmd(stages),
		newServeCmd(stages),
	)
	return root
}

// Run executes the command line args (without the program's name) with
// the stages of stages, and returns the process exit status: 0 when every
// planned frame is good, 1 when there is no usable result, 2 for a bad
// command line or profile, 3 when the file is complete but some frames
// are missing, corrupt or rejected. It is the one place where errors turn
// into messages and exit statuses.
func Run(stages *registry.Registry, args []string) int {
	root := newRootCmd(stages)
	root.SetArgs(args)
	// The live stream's sockets kept bound between scans are closed
	// before the process ends, with the end of their last series written
	// out to its consumer.
	defer stream.CloseKept(stream.DefaultLinger)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	code := exitFailure
	switch {
	case errors.Is(err, scan.ErrUsage):
		code = exitUsage
	case errors.Is(err, scan.ErrIncomplete):
		code = exitIncomplete
	}
	if err == scan.ErrIncomplete || err == scan.ErrChecks { // said why already
		return code
	}
	if errors.Is(err, writer.ErrExists) {
		fmt.Fprintf(os.Stderr, "h5ingest: %v (give --overwrite to replace it)\n", err)
		return code
	}
	fmt.Fprintf(os.Stderr, "h5ingest: %v\n", scan.Explain(err))
	return code
}
