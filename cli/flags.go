package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/writer"
)

// scanFlags are the flags that every command writing a scan shares. Most
// set a profile key: given on the command line they are the top layer over
// the profile, the environment and the defaults.
type scanFlags struct {
	profile  string
	output   string
	scanID   string
	logLevel string
	observe  scan.Observer // --metrics, --report, --metrics-linger
	meta     []string      // --meta KEY=VALUE
	// user is the --meta pairs, as the files keep them (load sets it).
	user map[string]any

	stages *registry.Registry // the stages a profile may name
	fs     *pflag.FlagSet
	keys   *config.FlagSet // the flags that set profile keys
}

// register defines the scan flags on fs; their defaults are the built-in
// profile defaults.
func (s *scanFlags) register(fs *pflag.FlagSet, stages *registry.Registry) {
	s.stages = stages
	s.fs, s.keys = fs, config.NewFlagSet(fs)
	fs.StringVar(&s.profile, "profile", "", "beamline profile: a YAML file, or a built-in profile's name (see h5ingest profiles list)")
	fs.StringVarP(&s.output, "output", "o", "", "HDF5 file to write (default: the profile's output.directory and output.template)")
	fs.StringVar(&s.scanID, "scan-id", "", "scan id, for the profile's file name template")
	fs.StringVar(&s.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fs.StringVar(&s.observe.Metrics, "metrics", "", "serve the status page, /status.json, /preview.png and Prometheus /metrics on ADDR (:9100 or 9100: loopback; 0.0.0.0:9100: every interface)")
	s.keys.Bind("metrics", "status.address")
	fs.StringVar(&s.observe.Report, "report", "", "after the scan, write a report page (HTML, with the throughput over time) to this file")
	fs.DurationVar(&s.observe.Linger, "metrics-linger", 0, "after the scan, keep serving --metrics this long, so that a scraper sees the final figures")
	fs.StringArrayVar(&s.meta, "meta", nil, "KEY=VALUE kept in the scan's files under /entry/user_metadata; a VALUE that is JSON (a number, true, an object) is kept as such; repeatable")
	s.keys.Add(stages.Names(),
		config.Flag{Name: "backend", Key: "backend"},
		config.Flag{Name: "compression", Key: "output.compression"},
		config.Flag{Name: "level", Key: "output.level", Help: "compression level (0: the codec's default)"},
		config.Flag{Name: "layout", Key: "output.layout"},
		config.Flag{Name: "overwrite", Key: "output.overwrite", Help: "replace an existing output file"},
		config.Flag{Name: "backend-shuffle", Key: "output.backend_shuffle", Help: "do the codec's bit transpose on the decode backend (the GPU with cuda); the files do not change"},
		config.Flag{Name: "flush", Key: "output.flush_interval", Help: "how often readers following the file see new frames"},
		config.Flag{Name: "file-mode", Key: "output.file_mode", Help: `permission bits of the scan's files, in octal, e.g. "0640" (the group reads them) or "0644" (everyone)`},
		config.Flag{Name: "file-group", Key: "output.file_group", Help: "owner group of the scan's files, a name or id (the process must belong to it)"},
		config.Flag{Name: "darks", Key: "plan.darks", Help: "dark fields at the start of the scan"},
		config.Flag{Name: "flats", Key: "plan.flats", Help: "flat fields after the darks"},
		config.Flag{Name: "projections", Key: "plan.projections", Help: "projections after the flats (no plan at all: every frame is a projection)"},
		config.Flag{Name: "sequence", Key: "plan.sequence", Help: `frames in order as kind:count, e.g. "flats:20,darks:10,projections:1800,flats:20"`},
		config.Flag{Name: "positions", Key: "plan.positions", Help: "CSV file of scan positions, x,y[,z] in metres, one line per frame (ptychography; CXI translations)"},
		config.Flag{Name: "title", Key: "metadata.title", Help: "the scan's title in its files (/entry/title); default: the profile's description"},
		config.Flag{Name: "sample", Key: "metadata.sample", Help: "the sample's name in the scan's files (/entry/sample/name)"},
		config.Flag{Name: "experiment-id", Key: "metadata.experiment_identifier", Help: "the proposal or experiment the scan belongs to (/entry/experiment_identifier)"},
		config.Flag{Name: "stream", Key: "stream.address", Help: "also send the scan's images to online analysis as DECTRIS Stream V2 on a ZeroMQ PUSH socket bound to tcp://HOST:PORT"},
		config.Flag{Name: "drop-when-full", Key: "source.drop_when_full", Help: "never hold the detector back: frames arriving while the pipeline is full are dropped, counted and recorded missing"},
		config.Flag{Name: "angle-start", Key: "plan.angle_start", Help: "rotation angle of the first projection, degrees"},
		config.Flag{Name: "angle-end", Key: "plan.angle_end", Help: "rotation angle the projections stop short of, degrees"},
	)
}

// logger returns the command's logger; with --scan-id every line names
// the scan.
func (s *scanFlags) logger() (*zap.Logger, error) {
	log, err := newLogger(s.logLevel)
	if err != nil || s.scanID == "" {
		return log, err
	}
	return log.With(zap.String("scan", s.scanID)), nil
}

// load returns the profile layered with the flags given on the command
// line, and the scan plan it holds. Errors are usage errors.
func (s *scanFlags) load() (config.Profile, plan.Plan, error) {
	flags, err := s.keys.Values()
	if err != nil {
		return config.Profile{}, plan.Plan{}, scan.Usage(err)
	}
	if s.scanID != "" {
		if err := config.CheckScanID(s.scanID); err != nil {
			return config.Profile{}, plan.Plan{}, scan.Usage(fmt.Errorf("--scan-id: %w", err))
		}
	}
	// Counts on the command line replace a profile's sequence.
	for _, name := range []string{"darks", "flats", "projections"} {
		if _, given := flags["plan."+name]; given {
			if _, seq := flags["plan.sequence"]; !seq {
				flags["plan.sequence"] = config.FlagValue{Flag: "--" + name, Value: ""}
			}
		}
	}
	p, _, err := config.LoadLayers(config.Layers{Profile: s.profile, Flags: flags, Names: s.stages.Names()})
	if err != nil {
		return config.Profile{}, plan.Plan{}, scan.Usage(err)
	}
	pl, err := p.Plan.Plan()
	if err != nil {
		return config.Profile{}, plan.Plan{}, scan.Usage(err)
	}
	s.observe.Metrics = p.Status.Address
	if s.user, err = writer.ParseMetadata(s.meta); err != nil {
		return config.Profile{}, plan.Plan{}, scan.Usage(fmt.Errorf("--meta %w", err))
	}
	return p, pl, nil
}

// files returns the files of a scan of every module of the profile, as
// -o or --scan-id and the profile's template name them.
func (s *scanFlags) files(p config.Profile, now time.Time) (scan.Files, error) {
	return scan.NewFiles(p, scan.Names{Output: s.output, ScanID: s.scanID, Now: now})
}

// options returns the options of each module's scan, as the flags and
// the profile say: what the scan says as it runs on standard error
// (notify), progress on the terminal.
func (s *scanFlags) options(profile config.Profile, pl plan.Plan, log *zap.Logger) scan.Options {
	format, _ := profile.Detector.Format() // checked with the profile; a sender's or capture's replaces it
	return scan.Options{Profile: profile, Plan: pl, Format: format, User: s.user, Log: log,
		Notify: s.notify, Progress: startProgress, Stages: s.stages}
}

// notify prints what a scan says as it runs on standard error, one note a
// line; with --log-level error, not where it waits for the detector.
func (s *scanFlags) notify(n scan.Note) {
	if n.Kind == scan.Waiting && s.logLevel == "error" {
		return
	}
	printNote(os.Stderr, n)
}
