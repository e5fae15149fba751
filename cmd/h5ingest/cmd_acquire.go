package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
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
	scan   scanFlags
	listen string
	record string
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
	d := config.Default()
	fs.StringVar(&f.listen, "listen", "", fmt.Sprintf("address to listen on, ADDR:PORT (default: the profile's source.address and source.port, %s:%d)", d.Source.Address, d.Source.Port))
	fs.String("provider", d.Source.Provider, "libfabric provider: verbs (RoCE, InfiniBand) or tcp")
	f.scan.bindKey("provider", "source.provider")
	fs.Int("slots", d.Source.RingSlots, "frame slots in the receive ring: frames the detector may have in flight")
	f.scan.bindKey("slots", "source.ring_slots")
	fs.Duration("connect-timeout", d.Source.ConnectTimeout, "how long to wait for the detector to connect")
	f.scan.bindKey("connect-timeout", "source.connect_timeout")
	fs.Duration("idle-timeout", d.Source.IdleTimeout, "how long a silence mid-scan ends it")
	f.scan.bindKey("idle-timeout", "source.idle_timeout")
	fs.String("output-dir", d.Output.Directory, "directory for the output file, named by --name (instead of -o)")
	f.scan.bindKey("output-dir", "output.directory")
	fs.String("name", d.Output.Template, "output file name template in --output-dir: {scan} scan id, {date} YYYYMMDD, {module} module id")
	f.scan.bindKey("name", "output.template")
	fs.StringVar(&f.record, "record", "", "also keep every frame as it arrived in this capture file (.pmcap)")
	return cmd
}

func acquire(ctx context.Context, f *acquireFlags) error {
	s := &f.scan
	if s.output != "" && s.fs.Changed("output-dir") {
		return usageError(errors.New("give -o or --output-dir, not both"))
	}
	profile, plan, err := s.load()
	if err != nil {
		return err
	}
	out, err := s.outputPath(profile, profile.Detector.Modules[0].ID)
	if err != nil {
		return err
	}
	src := profile.Source
	addr := f.listen
	if addr == "" {
		addr = net.JoinHostPort(src.Address, strconv.Itoa(src.Port))
	}
	cfg := fabric.Config{
		Provider: src.Provider, Addr: addr, Slots: src.RingSlots,
		ConnectTimeout: src.ConnectTimeout, IdleTimeout: src.IdleTimeout,
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
	log.Info("waiting for the detector", zap.Stringer("address", l.Addr()), zap.String("provider", src.Provider))
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

	scan, err := newScan(out, profile, plan, hello.Format, log)
	if err != nil {
		return err
	}
	defer scan.abort()
	if err := scan.observe(&s.observe, s.scanID, int(hello.Module)); err != nil {
		return err
	}
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
