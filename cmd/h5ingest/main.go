// Command h5ingest moves X-ray detector frames from the wire (or a capture
// file) to chunked, compressed HDF5 files.
//
// Each subcommand lives in a file of its own, cmd_<name>.go.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/stock"
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

// stages are the command's named stages: h5ingest's own. A facility's
// build of the command registers its own beside them here.
var stages = newStages()

// newStages returns a registry of h5ingest's own stages.
func newStages() *registry.Registry {
	r := registry.New()
	if err := stock.Register(r); err != nil {
		panic(err) // an empty registry takes every built-in name
	}
	return r
}

func newRootCmd() *cobra.Command {
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
		newReplayCmd(),
		newVerifyCmd(),
		newInspectCmd(),
		newProfilesCmd(),
		newBenchCmd(),
		newSendCmd(), newAcquireCmd(),
		newMasterCmd(),
		newRecoverCmd(),
		newServeCmd(),
	)
	return root
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes the command line args and returns the process exit status.
// It is the one place where errors turn into messages and exit statuses.
func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
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
	fmt.Fprintf(os.Stderr, "h5ingest: %v\n", err)
	return code
}
