package cli

import (
	"context"
	"errors"
	"fmt"
	"h5ingest/config"
	"h5ingest/registry"
	"h5ingest/scan"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// acquireFlags are the flags of acquire beyond the scan's.
type acquireFlags struct {
	scan   scanFlags
	listen string
	record string
	module int // --module: the one module to take; -1 for every module
	// params and frontEnd are where a receiver over static queue pairs
	// writes its end and reads the front end's (--transport roce).
	params, frontEnd string
}

func newAcquireCmd(stages *registry.Registry) *cobra.Command {
	var f acquireFlags
	cmd := &cobra.Command{
		Use:   "acquire --listen ADDR:PORT -o OUT.h5",
		Short: "Receive a scan from a detector module over RDMA (libfabric) and write it to HDF5",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return acquire(cmd.Context(), &f)
		},
	}
	f.scan.register(cmd.Flags(), stages)
	fs := cmd.Flags()
	d := config.Default()
	fs.StringVar(&f.listen, "listen", "", fmt.Sprintf("address to listen on, ADDR:PORT (default: the profile's source.address and source.port, %s:%d)", d.Source.Address, d.Source.Port))
	f.scan.keys.Add(stages.Names(),
		config.Flag{Name: "transport", Key: "source.transport", Help: "how frames arrive: " + strings.Join(stages.Names().Transports, " or ")},
		config.Flag{Name: "provider", Key: "source.provider", Help: "libfabric provider: verbs (RoCE, InfiniBand) or tcp"},
		config.Flag{Name: "slots", Key: "source.ring_slots", Help: "frame slots in the receive ring: frames the detector may have in flight"},
		config.Flag{Name: "connect-timeout", Key: "source.connect_timeout", Help: "how long to wait for the detector to connect"},
		config.Flag{Name: "idle-timeout", Key: "source.idle_timeout", Help: "how long a silence mid-scan ends it"},
		config.Flag{Name: "output-dir", Key: "output.directory", Help: "directory for the output file, named by --name (instead of -o)"},
		config.Flag{Name: "name", Key: "output.template", Help: "output file name template in --output-dir: {scan} scan id, {date} YYYYMMDD, {module} module id"},
	)
	fs.StringVar(&f.record, "record", "", "also keep every frame as it arrived in this capture file (.pmcap)")
	fs.StringVar(&f.params, "rdma-params", "", "write this receiver's end of each module's queue pair (GID, QPN, PSN, ring address, rkey) to this JSON file, for the front end; again with \"ready\": true once they are ready to receive (static queue pairs, as --transport roce sets up)")
	fs.StringVar(&f.frontEnd, "front-end", "", "read the front end's end of each queue pair (GID, QPN, PSN) from this JSON file, waiting for it until the connect timeout, where the profile's source.front_end gives none")
	fs.IntVar(&f.module, "module", -1, "take this module's stream only (a receiver per module); default: every module of the profile")
	return cmd
}

func acquire(ctx context.Context, f *acquireFlags) error {
	s := &f.scan
	if s.output != "" && s.fs.Changed("output-dir") {
		return scan.Usage(errors.New("give -o or --output-dir, not both"))
	}
	profile, plan, err := s.load()
	if err != nil {
		return err
	}
	files, err := s.files(profile, time.Now())
	if err != nil {
		return err
	}
	if f.module >= 0 {
		if files, err = files.Only(f.module); err != nil {
			return err
		}
	}
	log, err := s.logger()
	if err != nil {
		return err
	}
	defer log.Sync()
	// The GPU's kernels compiled now, not when the detector connects.
	unload, err := scan.PreloadBackend(s.stages, profile.Backend, "", log)
	if err != nil {
		return err
	}
	defer unload()
	a, err := scan.NewAcquisition(scan.AcquireOptions{
		Options: s.options(profile, plan, log), Files: files, Listen: f.listen,
		Record: f.record, ProfileName: s.profile, ScanID: s.scanID, Observer: &s.observe,
		ParamsFile: f.params, PeerFile: f.frontEnd,
	})
	if err != nil {
		return err
	}
	if err := a.Checks().Run(s.notify); err != nil {
		return checksFailed(os.Stderr, err)
	}
	// The files are this scan's from now on, while it waits for the
	// detector: another scan of them is refused, not this one later.
	release, err := a.Hold()
	if err != nil {
		return err
	}
	defer release()
	// The status page is up while the detector is awaited.
	if err := s.observe.Start(log); err != nil {
		return err
	}
	defer s.observe.Close()
	stop := scan.NewStopper(ctx, profile.Source.ConnectTimeout, s.notify)
	stop.Notify(os.Interrupt, syscall.SIGTERM)
	defer stop.Close()
	res, err := a.Run(stop)
	return scanDone(log, res, err)
}
