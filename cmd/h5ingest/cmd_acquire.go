package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/ingest/capture"
	"h5ingest/ingest/fabric"
)

// acquireFlags are the flags of acquire beyond the scan's.
type acquireFlags struct {
	scan           scanFlags
	scanID         string
	outputDir      string
	nameTemplate   string
	listen         string
	provider       string
	slots          int
	connectTimeout time.Duration
	idleTimeout    time.Duration
	record         string
}

func newAcquireCmd() *cobra.Command {
	var f acquireFlags
	cmd := &cobra.Command{
		Use:   "acquire --listen ADDR:PORT -o OUT.h5",
		Short: "Receive a scan from a detector module over RDMA (libfabric) and write it to HDF5",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return acquire(cmd.Context(), &f)
		},
	}
	f.scan.register(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&f.scanID, "scan-id", "", "scan identifier, for the file name template")
	fs.StringVar(&f.outputDir, "output-dir", "", "directory for the output file, named by --name (instead of -o)")
	fs.StringVar(&f.nameTemplate, "name", "{scan}.h5", "output file name in --output-dir; {scan} is the scan id")
	fs.StringVar(&f.listen, "listen", "0.0.0.0:4791", "address to listen on, ADDR:PORT")
	fs.StringVar(&f.provider, "provider", "tcp", "libfabric provider: verbs (RoCE, InfiniBand) or tcp")
	fs.IntVar(&f.slots, "slots", 16, "frame slots in the receive ring: frames the detector may have in flight")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", time.Minute, "how long to wait for the detector to connect")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 10*time.Second, "how long a silence mid-scan ends it")
	fs.StringVar(&f.record, "record", "", "also keep every frame as it arrived in this capture file (.pmcap)")
	return cmd
}

// outputPath returns the output file the flags name.
func (f *acquireFlags) outputPath() (string, error) {
	if f.outputDir == "" {
		if f.scan.output == "" {
			return "", usageError(errors.New("no output file: give -o FILE.h5, or --output-dir DIR and --scan-id"))
		}
		return f.scan.output, nil
	}
	if f.scan.output != "" {
		return "", usageError(errors.New("give -o or --output-dir, not both"))
	}
	if strings.Contains(f.nameTemplate, "{scan}") && f.scanID == "" {
		return "", usageError(fmt.Errorf("--name %q needs --scan-id", f.nameTemplate))
	}
	name := strings.ReplaceAll(f.nameTemplate, "{scan}", f.scanID)
	if name == "" || strings.ContainsRune(name, filepath.Separator) {
		return "", usageError(fmt.Errorf("--name %q: want a file name", f.nameTemplate))
	}
	return filepath.Join(f.outputDir, name), nil
}

func acquire(ctx context.Context, f *acquireFlags) error {
	s := &f.scan
	out, err := f.outputPath()
	if err != nil {
		return err
	}
	s.output = out
	profile, err := config.Load(s.profile)
	if err != nil {
		return usageError(err)
	}
	plan, err := s.plan()
	if err != nil {
		return err
	}
	cfg := fabric.Config{
		Provider: f.provider, Addr: f.listen, Slots: f.slots,
		ConnectTimeout: f.connectTimeout, IdleTimeout: f.idleTimeout,
	}
	if err := cfg.Validate(); err != nil {
		return usageError(err)
	}
	log, err := newLogger(s.logLevel)
	if err != nil {
		return err
	}
	defer log.Sync()

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := fabric.Listen(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	log.Info("waiting for the detector", zap.Stringer("address", l.Addr()), zap.String("provider", f.provider))
	stream, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	defer stream.Close()
	hello := stream.Hello()
	log.Info("detector connected", zap.Uint16("module", hello.Module), zap.Stringer("mode", hello.Mode),
		zap.Stringer("format", hello.Format), zap.Uint64("frames", hello.Frames))
	if plan.Frames() > 0 && hello.Frames > 0 && hello.Frames != uint64(plan.Frames()) {
		log.Warn("the detector's frame count is not the plan's", zap.Uint64("detector", hello.Frames), zap.Int("plan", plan.Frames()))
	}

	var rec *capture.Writer
	if f.record != "" {
		file, err := os.Create(f.record)
		if err != nil {
			return fmt.Errorf("record: %w", err)
		}
		defer file.Close()
		rec, err = capture.NewWriter(file, capture.Metadata{
			Profile: s.profile, Created: time.Now().UTC().Format(time.RFC3339), Software: "h5ingest acquire",
		})
		if err != nil {
			return fmt.Errorf("record %s: %w", f.record, err)
		}
		stream.Record(rec)
	}

	scan, err := newScan(s, profile, plan, hello.Format, log)
	if err != nil {
		return err
	}
	defer scan.abort()
	srcErr := scan.run(ctx, stream)
	st := stream.Stats()
	log.Info("stream ended", zap.Uint64("frames", st.Frames), zap.Uint64("bytes", st.Bytes),
		zap.Duration("held_back", st.HeldBack), zap.Duration("sender_held_back", st.SenderHeldBack), zap.NamedError("reason", srcErr))
	if rec != nil {
		if err := rec.Close(); err != nil {
			log.Error("record failed", zap.String("file", f.record), zap.Error(err))
		}
	}
	err = scan.finish(srcErr)
	fmt.Fprintf(os.Stdout, "  received        %d frames, %d bytes; ring full (sender held back) %v\n",
		st.Frames, st.Bytes, st.HeldBack.Round(time.Microsecond))
	return err
}
