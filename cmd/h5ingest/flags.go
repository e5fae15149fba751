package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/plan"
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

	fs   *pflag.FlagSet
	keys map[string]string // flag name -> profile key
}

// register defines the scan flags on fs; their defaults are the built-in
// profile defaults.
func (s *scanFlags) register(fs *pflag.FlagSet) {
	d := config.Default()
	s.fs = fs
	s.keys = map[string]string{}
	key := func(flag, key string) { s.keys[flag] = key }
	fs.StringVar(&s.profile, "profile", "", "beamline profile: a YAML file, or a built-in profile's name (see h5ingest profiles list)")
	fs.StringVarP(&s.output, "output", "o", "", "HDF5 file to write (default: the profile's output.directory and output.template)")
	fs.StringVar(&s.scanID, "scan-id", "", "scan id, for the profile's file name template")
	fs.StringVar(&s.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fs.StringVar(&s.observe.Metrics, "metrics", "", "serve the status page, /status.json, /preview.png and Prometheus /metrics on ADDR (:9100 or 9100: loopback; 0.0.0.0:9100: every interface)")
	fs.StringVar(&s.observe.Report, "report", "", "after the scan, write a report page (HTML, with the throughput over time) to this file")
	fs.DurationVar(&s.observe.Linger, "metrics-linger", 0, "after the scan, keep serving --metrics this long, so that a scraper sees the final figures")
	key("metrics", "status.address")
	fs.String("backend", d.Backend, keyHelp("backend"))
	key("backend", "backend")
	fs.String("compression", d.Output.Compression, keyHelp("output.compression"))
	key("compression", "output.compression")
	fs.Int("level", d.Output.Level, "compression level for bszstd and deflate (0: the codec's default)")
	key("level", "output.level")
	fs.String("layout", d.Output.Layout, keyHelp("output.layout"))
	key("layout", "output.layout")
	fs.Bool("overwrite", d.Output.Overwrite, "replace an existing output file")
	key("overwrite", "output.overwrite")
	fs.Bool("backend-shuffle", d.Output.BackendShuffle, "do the bit transpose of bslz4 and bszstd on the decode backend (the GPU with cuda); the files do not change")
	key("backend-shuffle", "output.backend_shuffle")
	fs.Duration("flush", d.Output.FlushInterval, "how often readers following the file see new frames")
	key("flush", "output.flush_interval")
	fs.Int("darks", d.Plan.Darks, "dark fields at the start of the scan")
	key("darks", "plan.darks")
	fs.Int("flats", d.Plan.Flats, "flat fields after the darks")
	key("flats", "plan.flats")
	fs.Int("projections", d.Plan.Projections, "projections after the flats (no plan at all: every frame is a projection)")
	key("projections", "plan.projections")
	fs.String("sequence", d.Plan.Sequence, `frames in order as kind:count, e.g. "flats:20,darks:10,projections:1800,flats:20"`)
	key("sequence", "plan.sequence")
	fs.String("positions", d.Plan.Positions, "CSV file of scan positions, x,y[,z] in metres, one line per frame (ptychography; CXI translations)")
	key("positions", "plan.positions")
	fs.String("title", d.Metadata.Title, "the scan's title in its files (/entry/title); default: the profile's description")
	key("title", "metadata.title")
	fs.String("sample", d.Metadata.Sample, "the sample's name in the scan's files (/entry/sample/name)")
	key("sample", "metadata.sample")
	fs.String("experiment-id", d.Metadata.ExperimentID, "the proposal or experiment the scan belongs to (/entry/experiment_identifier)")
	key("experiment-id", "metadata.experiment_identifier")
	fs.StringArrayVar(&s.meta, "meta", nil, "KEY=VALUE kept in the scan's files under /entry/user_metadata; a VALUE that is JSON (a number, true, an object) is kept as such; repeatable")
	fs.String("stream", d.Stream.Address, "also send the scan's images to online analysis as DECTRIS Stream V2 on a ZeroMQ PUSH socket bound to tcp://HOST:PORT")
	key("stream", "stream.address")
	fs.Bool("drop-when-full", d.Source.DropWhenFull, "never hold the detector back: frames arriving while the pipeline is full are dropped, counted and recorded missing")
	key("drop-when-full", "source.drop_when_full")
	fs.Float64("angle-start", d.Plan.AngleStart, "rotation angle of the first projection, degrees")
	key("angle-start", "plan.angle_start")
	fs.Float64("angle-end", d.Plan.AngleEnd, "rotation angle the projections stop short of, degrees")
	key("angle-end", "plan.angle_end")
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

// bindKey makes a command's own flag set a profile key too.
func (s *scanFlags) bindKey(flag, key string) { s.keys[flag] = key }

// load returns the profile layered with the flags given on the command
// line, and the scan plan it holds. Errors are usage errors.
func (s *scanFlags) load() (config.Profile, plan.Plan, error) {
	flags := map[string]config.FlagValue{}
	var err error
	s.fs.Visit(func(f *pflag.Flag) {
		key, ok := s.keys[f.Name]
		if !ok || err != nil {
			return
		}
		var v any
		if v, err = typedValue(s.fs, f); err == nil {
			flags[key] = config.FlagValue{Flag: "--" + f.Name, Value: v}
		}
	})
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
	p, _, err := config.LoadLayers(config.Layers{Profile: s.profile, Flags: flags, Names: stages.Names()})
	if err != nil {
		return config.Profile{}, plan.Plan{}, scan.Usage(err)
	}
	pl, err := p.Plan.Plan()
	if err != nil {
		return config.Profile{}, plan.Plan{}, scan.Usage(err)
	}
	s.observe.Metrics = p.Status.Address
	if s.user, err = parseMeta(s.meta); err != nil {
		return config.Profile{}, plan.Plan{}, scan.Usage(err)
	}
	return p, pl, nil
}

// parseMeta turns --meta KEY=VALUE pairs into the user metadata a file
// keeps: a VALUE that parses as JSON keeps its type, any other is text.
func parseMeta(pairs []string) (map[string]any, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--meta %q: want KEY=VALUE", kv)
		}
		if err := writer.CheckMetadataKey(k); err != nil {
			return nil, fmt.Errorf("--meta %q: %w", kv, err)
		}
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil || x == nil {
			x = v
		}
		m[k] = x
	}
	return m, nil
}

// typedValue returns a flag's value with its Go type.
func typedValue(fs *pflag.FlagSet, f *pflag.Flag) (any, error) {
	switch f.Value.Type() {
	case "string":
		return fs.GetString(f.Name)
	case "int":
		return fs.GetInt(f.Name)
	case "bool":
		return fs.GetBool(f.Name)
	case "duration":
		return fs.GetDuration(f.Name)
	case "float64":
		return fs.GetFloat64(f.Name)
	}
	return nil, fmt.Errorf("--%s: flags of type %s cannot set a profile key", f.Name, f.Value.Type())
}

// files returns the files of a scan of every module of the profile, as
// -o or --scan-id and the profile's template name them.
func (s *scanFlags) files(p config.Profile, now time.Time) (scan.Files, error) {
	return scan.NewFiles(p, scan.Names{Output: s.output, ScanID: s.scanID, Now: now})
}

// options returns the options of each module's scan, as the flags and
// the profile say: the summary on standard output, warnings on standard
// error, progress on the terminal.
func (s *scanFlags) options(profile config.Profile, pl plan.Plan, log *zap.Logger) scan.Options {
	format, _ := profile.Detector.Format() // checked with the profile; a sender's or capture's replaces it
	return scan.Options{Profile: profile, Plan: pl, Format: format, User: s.user, Log: log,
		Out: os.Stdout, Errs: os.Stderr, Progress: startProgress, Stages: stages}
}

// keyHelp returns the help of the profile key name, with the names of the
// stages it may take from the command's registry.
func keyHelp(name string) string {
	k, ok := config.KeyNamed(name)
	if !ok {
		panic("no profile key " + name)
	}
	return stages.Names().KeyHelp(k)
}
