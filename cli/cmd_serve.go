package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/serve"
	"h5ingest/service"
	"h5ingest/version"
)

// serveFlags are the flags of serve.
type serveFlags struct {
	listen    string
	tokenFile string
	profiles  string // directory of the profile files a request may name
	module    int
	modules   []int // the modules this node receives, with --module
	logLevel  string
	drain     time.Duration
	stream    string // every scan's live stream
	dataRoot  string // the directory under which a request may choose its output directory
	mkdirs    bool   // a request's output directory may be created
	hosts     []string
	maxConns  int
	perClient int
	gpu       bool   // open the GPU and load its kernels at start-up
	cudaCache string // the CUDA driver's cache of compiled kernels
	rdma      string // the profile whose static queue pairs are set up at start-up
	params    string // where the receiver's ends of them are written
	frontEnd  string // where the front end's ends are read
	onGPULost string // what serve does once the GPU is lost: exit or cpu

	stages *registry.Registry // the stages a profile may name
}

// DrainTimeout is serve's --drain-timeout by default: how long, after
// SIGTERM, the running scan may go on before it is cancelled.
const DrainTimeout = time.Minute

func newServeCmd(stages *registry.Registry) *cobra.Command {
	f := serveFlags{stages: stages}
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR:PORT] [--token-file FILE] [--profiles DIR] [--data-root DIR] [--modules K,...]",
		Short: "Run the scan service: a control system arms, waits for, stops and cancels scans over HTTP",
		Long: `serve receives a detector's scans (in a profile of several modules, those of --modules,
a file each, and the master where it takes them all), one after another, as a control system
asks over a JSON HTTP API under /v1/ (its OpenAPI document at /openapi.json): arm a scan with
a profile, overrides, a plan and metadata; wait for it; stop it (drain) or cancel it; follow it
as server-sent events at /v1/events. See docs/beamline.md.

A request reaches only what the operator allowed: a built-in profile or one of --profiles,
with the few keys a request may set over it (file name and template, layout, compression,
stream thinning); its output directory only under --data-root; it never replaces a file.
It binds 127.0.0.1 unless told otherwise; any other address needs --token-file, whose token
every request under /v1/ must then carry (Authorization: Bearer TOKEN). It answers no web
page: a request from another Origin, to another Host than its address or an --allow-host
name, or a POST that is not application/json, is refused.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8642", "address the HTTP API listens on, HOST:PORT")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the token that every request under /v1/ must carry; needed off loopback")
	fs.StringVar(&f.profiles, "profiles", "", "directory of profile files an arm request may name (besides the built-in profiles)")
	fs.IntVar(&f.module, "module", -1, "the detector module this node receives, in a profile of several (as --modules N)")
	fs.IntSliceVar(&f.modules, "modules", nil, "the detector modules this node receives, in a profile of several, e.g. 0,1: module K listens on source.port plus K's index in the profile's detector.modules")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.stream, "stream", "", "send every scan's images to online analysis as DECTRIS Stream V2 on a ZeroMQ PUSH socket bound to tcp://HOST:PORT (over the profile's stream.address)")
	fs.StringVar(&f.dataRoot, "data-root", "", "directory under which an arm request may choose its output directory (overrides.output.directory); without it, the profile's directory stands")
	fs.BoolVar(&f.mkdirs, "create-dirs", false, "create a request's output directory under --data-root when it does not exist")
	fs.StringArrayVar(&f.hosts, "allow-host", nil, "a name clients reach the service by (its host name, a proxy's), besides its listen address; repeatable")
	fs.IntVar(&f.maxConns, "max-connections", 64, "most HTTP connections open at once; more are answered 503")
	fs.IntVar(&f.perClient, "max-client-connections", 16, "most HTTP connections open at once from one client address")
	fs.DurationVar(&f.drain, "drain-timeout", DrainTimeout, "on SIGINT or SIGTERM, how long the running scan may go on to its end (its plan, its sender's end, a stop) before it is cancelled with the frames that arrived written (a warning, and serve exits 1); no scan is armed meanwhile")
	fs.BoolVar(&f.gpu, "preload-gpu", true, "open the GPU and compile its kernels at start-up, for every scan to share (false: each scan that decodes on it opens it)")
	fs.StringVar(&f.rdma, "rdma-profile", "", "set up the static RoCE queue pairs and rings of this profile's modules (source.transport roce) once, at start-up, for every scan: GET /v1/rdma shows the receiver's end of them")
	fs.StringVar(&f.params, "rdma-params", "", "with --rdma-profile: write the receiver's end of each queue pair to this JSON file too, for the front end, rewritten with a new nonce at each scan")
	fs.StringVar(&f.frontEnd, "front-end", "", "with --rdma-profile: read the front end's end of each queue pair from this JSON file at each scan, where neither the profile (source.front_end) nor PUT /v1/rdma gives it")
	fs.StringVar(&f.onGPULost, "on-gpu-lost", string(serve.GPULostExit), "once a sticky CUDA error has lost the GPU for the process (the scan it struck ends with every frame recorded): exit (drain the running scan, exit 1 for systemd to restart serve) or cpu (decode the next scans on the CPU, with a warning in /v1/health)")
	fs.StringVar(&f.cudaCache, "cuda-cache", "", "directory of the CUDA driver's cache of compiled kernels (default: $CUDA_CACHE_PATH, else $CACHE_DIRECTORY/cuda under systemd, else ~/.nv/ComputeCache)")
	return cmd
}

// runServe runs the scan service until a signal, or a lost GPU, ends it.
func runServe(ctx context.Context, f *serveFlags) error {
	token, err := service.ReadToken(f.tokenFile)
	if err != nil {
		return scan.Usage(err)
	}
	if err := service.CheckAddr(f.listen, token); err != nil {
		return scan.Usage(err)
	}
	for _, d := range []struct{ flag, dir string }{{"--profiles", f.profiles}, {"--data-root", f.dataRoot}} {
		if d.dir == "" {
			continue
		}
		if fi, err := os.Stat(d.dir); err != nil || !fi.IsDir() {
			return scan.Usage(fmt.Errorf("%s %s: not a directory", d.flag, d.dir))
		}
	}
	if f.mkdirs && f.dataRoot == "" {
		return scan.Usage(fmt.Errorf("--create-dirs needs --data-root: directories are created only under it"))
	}
	if f.maxConns < 1 || f.perClient < 1 {
		return scan.Usage(fmt.Errorf("--max-connections %d, --max-client-connections %d: want 1 or more", f.maxConns, f.perClient))
	}
	modules, err := serveModules(f.module, f.modules)
	if err != nil {
		return scan.Usage(err)
	}
	onGPULost, err := serve.ParseOnGPULost(f.onGPULost)
	if err != nil {
		return scan.Usage(fmt.Errorf("--on-gpu-lost %w", err))
	}
	log, err := newLogger(f.logLevel)
	if err != nil {
		return scan.Usage(err)
	}
	defer log.Sync()
	if fi, err := os.Stat(f.tokenFile); f.tokenFile != "" && err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the token file is readable by others than its owner: every user who can read it can change the scans; chmod 600 it",
			zap.String("token_file", f.tokenFile), zap.String("mode", fmt.Sprintf("%#o", fi.Mode().Perm())))
	}
	if f.gpu {
		// The GPU's kernels compiled now, not when a detector connects;
		// every scan shares its context.
		unload, err := scan.PreloadBackend(f.stages, config.Default().Backend, f.cudaCache, log)
		if err != nil {
			return err
		}
		defer unload()
	}
	// The status page and /metrics of the scan running, beside the API.
	watch := scan.NewServingObserver(log)
	guard := serve.NewGPUGuard(onGPULost, log)
	runner := &serve.Runner{Profiles: f.profiles, DataRoot: f.dataRoot, CreateDirs: f.mkdirs, ModuleIDs: modules,
		Stream: f.stream, Log: log, Observer: watch, Stages: f.stages, GPU: guard}
	if f.rdma != "" {
		if err := runner.OpenStation(serve.StationOptions{Profile: f.rdma, ParamsFile: f.params, PeerFile: f.frontEnd}); err != nil {
			return err
		}
		defer runner.Station.Close()
	} else if f.params != "" || f.frontEnd != "" {
		return scan.Usage(errors.New("--rdma-params and --front-end go with --rdma-profile, which sets the queue pairs up"))
	}
	svc := service.New(runner, service.Config{Token: token, Version: version.String(), AllowHosts: f.hosts,
		MaxConns: f.maxConns, MaxConnsPerClient: f.perClient, Links: runner.Links(), Levels: codecLevels(f.stages), Ended: scanEnded(log, watch)})
	serve.ShowService(watch, svc)
	svc.Handle("/", watch.Handler())
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := service.CheckAddr(ln.Addr().String(), token); err != nil {
		// The name resolved to another address when listened on.
		ln.Close()
		return scan.Usage(err)
	}
	fmt.Fprintf(os.Stdout, "h5ingest %s serving scans on http://%s (OpenAPI at /openapi.json)\n", version.String(), ln.Addr())
	log.Info("serving", zap.Stringer("address", ln.Addr()), zap.Bool("token", token != ""))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// SIGHUP (a closed terminal, a reload asked of the unit) ends no scan.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == os.Interrupt { // Ctrl-C: stop the scan now, as acquire's first does
					fmt.Fprintf(os.Stderr, "h5ingest: %v: stopping the running scan (its frames in flight written), then exiting\n", s)
					svc.Interrupt()
				} else {
					fmt.Fprintf(os.Stderr, "h5ingest: %v: taking no new scan; the running scan may end by itself for up to %v (--drain-timeout), then it is cancelled\n", s, f.drain)
				}
				log.Info("draining", zap.Stringer("signal", s), zap.Duration("drain_timeout", f.drain))
				cancel()
				return
			case s := <-hups:
				log.Info("signal ignored: serve and its scan go on (restart serve to read its settings again)", zap.Stringer("signal", s))
			case <-ctx.Done():
				return
			}
		}
	}()
	// A lost GPU ends serve as a signal does, where --on-gpu-lost says so.
	lost := make(chan error, 1)
	go func() { lost <- guard.Watch(ctx, cancel) }()
	err = svc.Serve(ctx, ln, f.drain)
	if errors.Is(err, service.ErrDrainTimeout) {
		// The scan was cancelled rather than drained: its frames not
		// written are counted discarded, and serve exits 1.
		log.Warn("drain timeout: the running scan was cancelled", zap.Duration("drain_timeout", f.drain), zap.Error(err))
	}
	cancel()
	if lerr := <-lost; lerr != nil {
		return errors.Join(fmt.Errorf("serve: %w", lerr), err)
	}
	return err
}

// serveModules returns the modules a serve receives, from --module and
// --modules: none (any profile of one module), one or several, each once.
func serveModules(module int, modules []int) ([]int, error) {
	if module >= 0 {
		if len(modules) > 0 {
			return nil, fmt.Errorf("--module %d and --modules: give one of them", module)
		}
		modules = []int{module}
	}
	for i, m := range modules {
		if m < 0 || m > 65535 {
			return nil, fmt.Errorf("--modules: module %d, want 0 to 65535", m)
		}
		if slices.Contains(modules[:i], m) {
			return nil, fmt.Errorf("--modules: module %d given twice", m)
		}
	}
	return modules, nil
}

// codecLevels returns the levels each registered codec takes, as its
// registry entry says, by codec name: the API's bounds of output.level.
func codecLevels(stages *registry.Registry) []service.CodecLevels {
	n := stages.Names()
	var out []service.CodecLevels
	for _, c := range n.Codecs {
		if i := n.CodecInfo[c]; i.MinLevel != 0 || i.MaxLevel != 0 {
			out = append(out, service.CodecLevels{Codec: c, Min: i.MinLevel, Max: i.MaxLevel})
		}
	}
	return out
}

// scanEnded returns what logs a scan's end in one line: info when it is
// done, a warning when incomplete or cancelled, an error when it failed;
// with its counts, files and error; and counts it on watch's /metrics.
func scanEnded(log *zap.Logger, watch *scan.Observer) func(service.Status) {
	return func(st service.Status) {
		watch.ScanEnded(string(st.State))
		c := st.Counts
		files := make([]string, len(st.Files))
		for i, f := range st.Files {
			files[i] = f.Path
			if f.Error != "" {
				files[i] += " (" + f.Error + ")"
			}
		}
		fields := []zap.Field{zap.String("scan", st.ScanID), zap.String("state", string(st.State)),
			zap.Int("planned", c.Planned), zap.Int("received", c.Received), zap.Int("written", c.Written),
			zap.Int("ok", c.OK), zap.Int("missing", c.Missing), zap.Int("crc_mismatch", c.CRCMismatch),
			zap.Int("rejected", c.Rejected), zap.Int("dropped", c.Dropped), zap.Int("discarded", c.Discarded),
			zap.Strings("files", files), zap.Int("notes", len(st.Notes))}
		if st.Error != "" {
			fields = append(fields, zap.String("error", st.Error))
		}
		switch st.State {
		case service.Done:
			log.Info("scan ended", fields...)
		case service.Failed:
			log.Error("scan ended", fields...)
		default:
			log.Warn("scan ended", fields...)
		}
	}
}
