package cli

import (
	"context"
	"fmt"
	"h5ingest/registry"
	"h5ingest/scan"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func newReplayCmd(stages *registry.Registry) *cobra.Command {
	var s scanFlags
	var fps float64
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "replay CAPTURE... -o OUT.h5",
		Short: "Turn a capture file (or one per module) into an HDF5 file, through the acquisition pipeline",
		Long: `Replay a capture file through the acquisition pipeline into HDF5, as acquire would
have written the scan. A capture may hold several modules' frames, interleaved; or
give one capture per module (for a profile of several modules, such as
pimega-540d): the frames of all are read in turn and each module's go to its file.
Without plan flags, the plan the (first) capture records is used.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !(fps >= 0) || math.IsInf(fps, 1) {
				return scan.Usage(fmt.Errorf("--fps %g: want a rate above 0, or 0 for as fast as possible", fps))
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return replay(cmd.Context(), args, &s, fps)
		},
	}
	s.register(cmd.Flags(), stages)
	cmd.Flags().Float64Var(&fps, "fps", 0, "replay at this many frames per second (of each capture), as a detector would send them (0: as fast as possible)")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the replay to this file (read it with go tool pprof)")
	return cmd
}

// startCPUProfile starts writing a CPU profile to path and returns the
// function that stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func replay(ctx context.Context, paths []string, s *scanFlags, fps float64) error {
	profile, plan, err := s.load()
	if err != nil {
		return err
	}
	files, err := s.files(profile, time.Now())
	if err != nil {
		return err
	}
	log, err := s.logger()
	if err != nil {
		return err
	}
	defer log.Sync()
	// The status server and the report directory are checked before any
	// file is created.
	if err := s.observe.Start(log); err != nil {
		return err
	}
	defer s.observe.Close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := scan.Replay(ctx, scan.ReplayOptions{
		Options: s.options(profile, plan, log), Files: files, Captures: paths, FPS: fps,
		ScanID: s.scanID, Observer: &s.observe,
	})
	return scanDone(log, res, err)
}
