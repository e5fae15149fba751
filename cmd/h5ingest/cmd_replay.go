package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"h5ingest/ingest"
	"h5ingest/ingest/capture"
	"h5ingest/ingest/frame"
)

func newReplayCmd() *cobra.Command {
	var s scanFlags
	var fps float64
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "replay CAPTURE -o OUT.h5",
		Short: "Turn a capture file into an HDF5 file, through the acquisition pipeline",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fps < 0 {
				return usageError(fmt.Errorf("--fps %g: want a rate above 0, or 0 for as fast as possible", fps))
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return replay(cmd.Context(), args[0], &s, fps)
		},
	}
	s.register(cmd.Flags())
	cmd.Flags().Float64Var(&fps, "fps", 0, "replay at this many frames per second, as a detector would send them (0: as fast as possible)")
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

func replay(ctx context.Context, path string, s *scanFlags, fps float64) error {
	profile, plan, err := s.load()
	if err != nil {
		return err
	}
	out, err := s.outputPath(profile, profile.Detector.Modules[0].ID)
	if err != nil {
		return err
	}
	log, err := newLogger(s.logLevel)
	if err != nil {
		return err
	}
	defer log.Sync()

	format, err := captureFormat(path)
	if err != nil {
		return err
	}
	r, err := capture.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	r.SetMaxPayload(max(capture.DefaultMaxPayload, int64(format.PayloadSize())))

	scan, err := newScan(out, profile, plan, format, log)
	if err != nil {
		return err
	}
	defer scan.abort()
	if err := scan.observe(&s.observe, s.scanID, profile.Detector.Modules[0].ID); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	src := ingest.NewCaptureSource(r, format.PayloadSize())
	if fps > 0 {
		src.Interval = time.Duration(float64(time.Second) / fps)
	}
	srcErr := scan.run(ctx, src)
	if errors.Is(srcErr, capture.ErrTruncated) {
		log.Warn("capture cut short", zap.Error(srcErr))
	}
	return scan.finish(srcErr)
}

// captureFormat returns the frame format of the scan in a capture: that of
// its first frame whose header checks out.
func captureFormat(path string) (frame.Format, error) {
	r, err := capture.Open(path)
	if err != nil {
		return frame.Format{}, err
	}
	defer r.Close()
	var skip []byte
	for range maxFormatProbe {
		h, _, err := r.Next(nil)
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			if h.Check() == nil {
				return h.Format, nil
			}
			skip = slices.Grow(skip[:0], int(h.PayloadSize))[:h.PayloadSize]
			if _, _, err := r.Next(skip); err != nil {
				return frame.Format{}, err
			}
		case errors.Is(err, io.EOF):
			return frame.Format{}, fmt.Errorf("capture %s holds no usable frame", path)
		case err != nil:
			return frame.Format{}, err
		}
	}
	return frame.Format{}, fmt.Errorf("capture %s: none of its first %d frames has a usable format", path, maxFormatProbe)
}

// maxFormatProbe is how many frames captureFormat reads to find the scan's
// format.
const maxFormatProbe = 64
