package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"h5ingest/scan"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/source/roce"
)

// sendFlags are the flags of the send command.
type sendFlags struct {
	to       string
	provider string
	mode     string
	fps      float64
	module   int
	timeout  time.Duration
	// transport roce plays a detector's front end over a static queue
	// pair, meeting the receiver through params and frontEnd.
	transport        string
	params, frontEnd string
	device           string
	devicePort       int
	gidIndex         int
}

func newSendCmd() *cobra.Command {
	var f sendFlags
	cmd := &cobra.Command{
		Use:   "send CAPTURE (--to HOST:PORT | --transport roce --rdma-params FILE --front-end FILE)",
		Short: "Send a capture file to a receiver, as a detector module does: over libfabric, or as a front end writing over a static RoCE queue pair",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(cmd.Context(), args[0], &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.to, "to", "", "receiver address HOST:PORT (required)")
	fs.StringVar(&f.provider, "provider", "tcp", "libfabric provider: tcp or verbs")
	fs.StringVar(&f.mode, "mode", "write", "how frames travel: write (one-sided, into the receiver's slots) or send (two-sided)")
	fs.Float64Var(&f.fps, "fps", 0, "frames per second, the detector's pace (0: as fast as the receiver takes them)")
	fs.IntVar(&f.module, "module", 0, "detector module this sender is: it sends that module's frames of the capture, and skips those of other modules")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to keep trying to connect, and to wait for the receiver's answers")
	fs.StringVar(&f.transport, "transport", "fabric", "fabric (h5ingest's protocol over libfabric, to --to) or roce (a front end's static queue pair: writes with immediate data, no credits)")
	fs.StringVar(&f.params, "rdma-params", "", "roce: the receiver's parameter file (acquire --rdma-params), waited for until --timeout")
	fs.StringVar(&f.frontEnd, "front-end", "", "roce: where to write this front end's end of the queue pair (acquire --front-end)")
	fs.StringVar(&f.device, "device", "", "roce: RDMA device (ibv_devinfo names them); empty: the first")
	fs.IntVar(&f.devicePort, "device-port", 1, "roce: the device's port")
	fs.IntVar(&f.gidIndex, "gid-index", 0, "roce: the port's GID table entry (RoCE v1 or v2)")
	return cmd
}

func send(ctx context.Context, path string, f *sendFlags) error {
	switch f.transport {
	case "fabric":
	case "roce":
		return sendFrontEnd(ctx, path, f)
	default:
		return scan.Usage(fmt.Errorf("--transport %q: want fabric or roce", f.transport))
	}
	if f.to == "" {
		return scan.Usage(errors.New("no receiver: give --to HOST:PORT"))
	}
	mode, err := fabric.ParseMode(f.mode)
	if err != nil {
		return scan.Usage(fmt.Errorf("--mode: %w", err))
	}
	if !(f.fps >= 0) || math.IsInf(f.fps, 1) {
		return scan.Usage(fmt.Errorf("--fps %g: want 0 or more", f.fps))
	}
	if f.module < 0 || f.module > 0xFFFF {
		return scan.Usage(fmt.Errorf("--module %d: want 0 to 65535", f.module))
	}
	r, format, err := capture.OpenScan(path)
	if err != nil {
		return err
	}
	defer r.Close()

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hello := fabric.Hello{Module: uint16(f.module), Mode: mode, Format: format}
	if f.fps > 0 {
		hello.PeriodNs = uint64(float64(time.Second) / f.fps)
	}
	waiting := func() {
		fmt.Fprintf(os.Stderr, "h5ingest: waiting for a receiver at %s (up to %v)\n", f.to, f.timeout)
	}
	s, err := fabric.DialWait(ctx, fabric.SenderConfig{Provider: f.provider, Addr: f.to, Hello: hello, Timeout: f.timeout, Waiting: waiting})
	if err != nil {
		return dialError(ctx, f, err)
	}
	st, err := fabric.SendCapture(ctx, s, r, f.fps)
	if err != nil {
		s.Abort()
	}
	printSendSummary(os.Stdout, f.to, f.module, st)
	warnPace(os.Stderr, f.fps, st)
	if err == nil && st.Frames == 0 && st.Skipped > 0 {
		return fmt.Errorf("%s holds no frame of module %d, only %d of other modules (see --module)", path, f.module, st.Skipped)
	}
	return sendError(ctx, st, err)
}

// dialError says in plain words why the sender found no receiver to take
// its scan, the library's error after it.
func dialError(ctx context.Context, f *sendFlags, err error) error {
	var refused *fabric.RefusedError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted while waiting for a receiver at %s: nothing sent", f.to)
	case errors.As(err, &refused):
		return fmt.Errorf("the receiver at %s refused this sender (module %d): %s; nothing sent", f.to, f.module, refused.Reason)
	case fabric.NotListening(err):
		return fmt.Errorf("no receiver at %s answered in %v: nothing listens there (start acquire, or arm the scan on serve, before the detector sends); nothing sent (%w)", f.to, f.timeout, err)
	}
	return fmt.Errorf("could not start sending to %s: %w", f.to, err)
}

// sendError says in plain words how a scan that began ended early: the
// receiver stopped it (it took no more frames and closed the connection),
// or a person interrupted the sender.
func sendError(ctx context.Context, st fabric.SendStats, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted after sending %d frames: the receiver has the scan as it stood", st.Frames)
	case errors.Is(err, fabric.ErrDisconnected):
		// The library's words (the provider's completion error) add
		// nothing a person can act on: the receiver ended the scan. A
		// receiver that stops says no count: the frames it confirmed (gave
		// their slot back for) are the ones the sender knows it took.
		if st.Credited == st.Frames {
			return fmt.Errorf("the receiver stopped the scan after %d frames, every one it confirmed: it took no more and closed the connection", st.Frames)
		}
		return fmt.Errorf("the receiver stopped the scan and closed the connection: sent %d frames; the receiver confirmed %d (the other %d were in its ring or on their way: its own summary says how many it wrote)", st.Frames, st.Credited, st.Frames-st.Credited)
	}
	return err
}

// printSendSummary prints what the sender of module sent.
func printSendSummary(w io.Writer, to string, module int, st fabric.SendStats) {
	secs := st.Elapsed.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(st.Bytes) / secs / 1e6
	}
	fmt.Fprintf(w, "sent to %s\n", to)
	if st.Received > 0 || st.Frames == 0 {
		fmt.Fprintf(w, "  frames          %d sent, %d received\n", st.Frames, st.Received)
	} else { // no bye: the receiver said no count
		fmt.Fprintf(w, "  frames          %d sent, %d confirmed by the receiver\n", st.Frames, st.Credited)
	}
	fmt.Fprintf(w, "  bytes           %d\n", st.Bytes)
	fmt.Fprintf(w, "  time            %.2f s, %.0f MB/s\n", secs, rate)
	fmt.Fprintf(w, "  held back       %v waiting for credits\n", st.HeldBack.Round(time.Microsecond))
	if st.Skipped > 0 {
		fmt.Fprintf(w, "  other modules   %d frames not sent (this sender is module %d)\n", st.Skipped, module)
	}
}

// paceTolerance is how far below --fps a sender may fall before it says so.
const paceTolerance = 0.95

// warnPace says when the sender could not keep the pace --fps asked for,
// and whether the receiver held it back.
func warnPace(w io.Writer, fps float64, st fabric.SendStats) {
	rate := st.Rate()
	if fps <= 0 || st.Frames < 2 || rate >= paceTolerance*fps {
		return
	}
	why := "the sender itself was too slow (reading the capture, or the machine)"
	if st.HeldBack > st.Sending/10 {
		why = fmt.Sprintf("the receiver held it back %v waiting for free slots", st.HeldBack.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "h5ingest: could not keep --fps %g: sent %d frames at %.1f frames/s; %s\n", fps, st.Frames, rate, why)
}

// sendFrontEnd plays a detector front end: it meets the receiver through
// the parameter files and writes the capture's frames of its module with
// immediate data, never waiting for the receiver.
func sendFrontEnd(ctx context.Context, path string, f *sendFlags) error {
	switch {
	case f.to != "":
		return scan.Usage(errors.New("--to: a front end over a static queue pair meets its receiver through --rdma-params and --front-end, not an address"))
	case f.params == "" || f.frontEnd == "":
		return scan.Usage(errors.New("--transport roce needs --rdma-params FILE (the receiver's) and --front-end FILE (this front end's)"))
	case !(f.fps >= 0) || math.IsInf(f.fps, 1):
		return scan.Usage(fmt.Errorf("--fps %g: want 0 or more", f.fps))
	case f.module < 0 || f.module > 0xFFFF:
		return scan.Usage(fmt.Errorf("--module %d: want 0 to 65535", f.module))
	}
	r, _, err := capture.OpenScan(path) // a capture it can read, before it waits
	if err != nil {
		return err
	}
	r.Close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "h5ingest: waiting for the receiver's parameters in %s (up to %v)\n", f.params, f.timeout)
	st, err := roce.Send(ctx, roce.SendConfig{Device: f.device, Port: f.devicePort, GIDIndex: f.gidIndex, Module: f.module,
		ParamsFile: f.params, FrontEndFile: f.frontEnd, Timeout: f.timeout, FPS: f.fps}, path)
	secs := st.Elapsed.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(st.Frames) / secs
	}
	fmt.Fprintf(os.Stdout, "written to the receiver of %s\n", f.params)
	fmt.Fprintf(os.Stdout, "  frames          %d written\n", st.Frames)
	fmt.Fprintf(os.Stdout, "  bytes           %d\n", st.Bytes)
	fmt.Fprintf(os.Stdout, "  time            %.2f s, %.0f frames/s\n", secs, rate)
	if st.Skipped > 0 {
		fmt.Fprintf(os.Stdout, "  other modules   %d frames not sent (this front end is module %d)\n", st.Skipped, f.module)
	}
	if f.fps > 0 && st.Late > 0 {
		fmt.Fprintf(os.Stderr, "h5ingest: %d writes came later than --fps %g asked\n", st.Late, f.fps)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("interrupted after writing %d frames", st.Frames)
	case err != nil:
		return fmt.Errorf("module %d: %w", f.module, err)
	case st.Frames == 0 && st.Skipped > 0:
		return fmt.Errorf("%s holds no frame of module %d, only %d of other modules (see --module)", path, f.module, st.Skipped)
	}
	return nil
}
