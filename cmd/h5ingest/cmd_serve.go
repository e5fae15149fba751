package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/service"
	"h5ingest/status"
	"h5ingest/version"
	"h5ingest/writer"
)

// serveFlags are the flags of serve.
type serveFlags struct {
	listen    string
	tokenFile string
	profiles  string // directory of the profile files a request may name
	module    int
	logLevel  string
	drain     time.Duration
	stream    string // every scan's live stream, unless its request sets stream.address
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR:PORT] [--token-file FILE] [--profiles DIR] [--module N]",
		Short: "Run the scan service: a control system arms, waits for, stops and cancels scans over HTTP",
		Long: `serve receives one detector module's scans, one after another, as a control system
asks over a JSON HTTP API under /v1/ (its OpenAPI document at /openapi.json): arm a scan with
a profile, overrides, a plan and metadata; wait for it; stop it (drain) or cancel it; follow it
as server-sent events at /v1/events. See docs/beamline.md.

It binds 127.0.0.1 unless told otherwise; any other address needs --token-file, whose token
every request that changes state must then carry (Authorization: Bearer TOKEN).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return serve(cmd.Context(), &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8642", "address the HTTP API listens on, HOST:PORT")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the token that requests changing state must carry; needed off loopback")
	fs.StringVar(&f.profiles, "profiles", "", "directory of profile files an arm request may name (besides the built-in profiles)")
	fs.IntVar(&f.module, "module", -1, "the detector module this node receives, in a profile of several (one serve per module node)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.stream, "stream", "", "send every scan's images to online analysis as DECTRIS Stream V2 on a ZeroMQ PUSH socket bound to tcp://HOST:PORT (a request's stream.address overrides it)")
	fs.DurationVar(&f.drain, "drain-timeout", time.Minute, "on SIGINT or SIGTERM, how long the running scan may take to drain before it is cancelled")
	return cmd
}

// minTokenLength bounds how short a token may be.
const minTokenLength = 16

func serve(ctx context.Context, f *serveFlags) error {
	token, err := readToken(f.tokenFile)
	if err != nil {
		return usageError(err)
	}
	if err := service.CheckAddr(f.listen, token); err != nil {
		return usageError(err)
	}
	if f.profiles != "" {
		if fi, err := os.Stat(f.profiles); err != nil || !fi.IsDir() {
			return usageError(fmt.Errorf("--profiles %s: not a directory", f.profiles))
		}
	}
	log, err := newLogger(f.logLevel)
	if err != nil {
		return usageError(err)
	}
	defer log.Sync()
	// The status page and /metrics of the scan running, beside the API.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	watch := &observeFlags{metrics: f.listen}
	watch.obs = &observer{flags: watch, log: log, reg: reg, srv: status.NewServer(reg), started: time.Now(), persistent: true}
	svc := service.New(&serveRunner{flags: f, log: log, observe: watch}, service.Config{Token: token, Version: version.String()})
	svc.Handle("/", watch.obs.srv.Handler())
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stdout, "h5ingest %s serving scans on http://%s (OpenAPI at /openapi.json)\n", version.String(), ln.Addr())
	log.Info("serving", zap.Stringer("address", ln.Addr()), zap.Bool("token", token != ""))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case s := <-sigs:
		fmt.Fprintf(os.Stderr, "h5ingest: %v: draining the running scan, then stopping\n", s)
	case <-ctx.Done():
	}
	svc.Drain(f.drain)
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	return nil
}

// readToken reads the token of --token-file: its first line, trimmed.
func readToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token, _, _ := strings.Cut(string(b), "\n")
	token = strings.TrimSpace(token)
	if len(token) < minTokenLength {
		return "", fmt.Errorf("--token-file %s: the token has %d characters, want %d or more", path, len(token), minTokenLength)
	}
	return token, nil
}

// serveRunner prepares the scans the service arms: acquires of the node's
// module.
type serveRunner struct {
	flags   *serveFlags
	log     *zap.Logger
	observe *observeFlags // the status page and metrics every scan shows on
}

// Prepare loads the request's profile with its overrides, plan and
// metadata on top, and runs acquire's pre-scan checks.
func (r *serveRunner) Prepare(req service.ArmRequest) (service.Scan, error) {
	profile, pl, err := r.load(req)
	if err != nil {
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	f := &acquireFlags{module: r.flags.module, observe: r.observe}
	f.scan.scanID = req.ScanID
	if req.Output != "" {
		f.scan.output = filepath.Join(profile.Output.Directory, req.Output)
	}
	if f.scan.user, err = userMetadata(req.UserMetadata); err != nil {
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	if len(profile.Detector.Modules) > 1 && f.module < 0 {
		return nil, &service.RefusedError{Reasons: []string{fmt.Sprintf(
			"profile %s has %d modules: a serve receives one (--module N), one serve per module node", req.Profile, len(profile.Detector.Modules))}}
	}
	setup, err := newAcquireSetup(f, profile, pl)
	if err != nil {
		return nil, &service.RefusedError{Reasons: []string{unwrapUsage(err)}}
	}
	if fails := setup.pre.failures(); len(fails) > 0 {
		reasons := make([]string, len(fails))
		for i, e := range fails {
			reasons[i] = e.Error()
		}
		return nil, &service.RefusedError{Reasons: reasons}
	}
	// The files are this scan's from its arming: another scan of them is
	// refused, not this one once the detector sent.
	release, err := holdFiles(setup.files, f.record)
	if err != nil {
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	return &serveScan{flags: f, profile: profile, plan: pl, setup: setup, release: release,
		log: r.log.With(zap.String("scan", req.ScanID))}, nil
}

// load returns the profile a request asks for: a built-in profile or a
// file of --profiles, with the request's overrides, plan and metadata as
// the layer the command line is elsewhere.
func (r *serveRunner) load(req service.ArmRequest) (config.Profile, plan.Plan, error) {
	ref := req.Profile
	if !slices.Contains(config.BuiltinNames(), ref) {
		if r.flags.profiles == "" || strings.ContainsAny(ref, `/\`) || ref == "." || ref == ".." {
			return config.Profile{}, plan.Plan{}, fmt.Errorf("profile %q: not a built-in profile (h5ingest profiles list)%s", ref, profilesHint(r.flags.profiles))
		}
		ref = filepath.Join(r.flags.profiles, ref)
		if _, err := os.Stat(ref); err != nil {
			return config.Profile{}, plan.Plan{}, fmt.Errorf("profile %q: neither built in nor a file of the profiles directory", req.Profile)
		}
	}
	flags := map[string]config.FlagValue{}
	set := func(key string, v any) { flags[key] = config.FlagValue{Flag: "request " + key, Value: v} }
	if r.flags.stream != "" {
		set("stream.address", r.flags.stream)
	}
	for k, v := range req.Overrides {
		set(k, jsonValue(v))
	}
	if p := req.Plan; p != nil {
		set("plan.darks", p.Darks)
		set("plan.flats", p.Flats)
		set("plan.projections", p.Projections)
		set("plan.sequence", p.Sequence)
		if p.AngleStart != 0 || p.AngleEnd != 0 {
			set("plan.angle_start", p.AngleStart)
			set("plan.angle_end", p.AngleEnd)
		}
	}
	for key, v := range map[string]string{"metadata.title": req.Title, "metadata.sample": req.Sample, "metadata.experiment_identifier": req.ExperimentID} {
		if v != "" {
			set(key, v)
		}
	}
	p, _, err := config.LoadLayers(config.Layers{Profile: ref, Flags: flags})
	if err != nil {
		return config.Profile{}, plan.Plan{}, err
	}
	pl, err := p.Plan.Plan()
	return p, pl, err
}

// profilesHint says where profile files may come from.
func profilesHint(dir string) string {
	if dir == "" {
		return "; this serve takes no profile files (--profiles DIR)"
	}
	return fmt.Sprintf(" nor a file name in %s", dir)
}

// jsonValue turns a JSON number that is whole into an int, as a profile
// file's integer would decode.
func jsonValue(v any) any {
	if x, ok := v.(float64); ok && x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return int(x)
	}
	return v
}

// userMetadata checks the keys of the request's user metadata, nested
// objects' too, before anything is written.
func userMetadata(m map[string]any) (map[string]any, error) {
	var check func(m map[string]any) error
	check = func(m map[string]any) error {
		for k, v := range m {
			if err := writer.CheckMetadataKey(k); err != nil {
				return fmt.Errorf("user_metadata: %w", err)
			}
			if sub, ok := v.(map[string]any); ok {
				if err := check(sub); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return m, check(m)
}

// unwrapUsage returns the message of a usage error.
func unwrapUsage(err error) string {
	var ee *exitError
	if errors.As(err, &ee) && ee.err != nil {
		return ee.err.Error()
	}
	return err.Error()
}

// serveScan is one armed scan of the service: an acquire of the node's
// module.
type serveScan struct {
	flags   *acquireFlags
	profile config.Profile
	plan    plan.Plan
	setup   acquireSetup
	release func() // gives up the files' locks, held from the arming
	log     *zap.Logger

	mu      sync.Mutex
	sig     *interrupts
	stopped bool
}

// Stop drains the scan as a first Ctrl-C drains an acquire.
func (s *serveScan) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.sig != nil {
		s.sig.request(stopRequest{})
	}
}

// Run acquires the scan, reporting its progress a few times a second, and
// verifies its file.
func (s *serveScan) Run(ctx context.Context, rep service.Reporter) service.Result {
	defer s.release()
	sig := newInterrupts(ctx, s.profile.Source.ConnectTimeout)
	defer sig.stop()
	s.mu.Lock()
	s.sig = sig
	if s.stopped {
		sig.request(stopRequest{})
	}
	s.mu.Unlock()

	var scan *scanRun
	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	s.flags.onScan = func(r *scanRun) {
		scan = r
		progressWG.Add(1)
		go func() {
			defer progressWG.Done()
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-progressDone:
					return
				case <-t.C:
					rep.Progress(serviceCounts(r.pipeline.Progress(), r.pipeline.Frames()))
				}
			}
		}()
	}
	_, err := acquireOne(sig, s.flags, s.profile, s.plan, s.setup.files, s.setup.cfg, s.log)
	close(progressDone)
	progressWG.Wait()

	res := service.Result{State: service.Done}
	var ee *exitError
	switch {
	case ctx.Err() != nil:
		res.State = service.Cancelled
	case err == nil:
	case errors.As(err, &ee) && ee.code == exitIncomplete:
		res.State = service.Incomplete
	default:
		res.State = service.Failed
	}
	if err != nil && (res.State == service.Failed || !errors.As(err, &ee) || ee.err != nil) {
		res.Error = unwrapUsage(err)
	}
	if scan == nil { // no detector connected: no file
		switch {
		case res.State == service.Incomplete: // stopped while waiting
			res.State = service.Cancelled
		case res.State == service.Done:
			res.State = service.Failed
		}
		if res.Error == "" {
			res.Error = "no detector connected"
		}
		return res
	}
	res.Counts = serviceCounts(scan.progress, scan.pipeline.Frames())
	rep.Progress(res.Counts)
	file := service.File{Path: scan.output, Module: s.setup.files.modules[0].module.ID}
	var vee *exitError
	switch verr := verify(io.Discard, scan.output); {
	case verr == nil, errors.As(verr, &vee) && vee.code == exitIncomplete:
		file.Verified = true
	default:
		file.Error = verr.Error()
	}
	rep.FileFinalised(file)
	res.Files = []service.File{file}
	return res
}

// serviceCounts returns a pipeline's progress as the service counts it.
func serviceCounts(p pipeline.Progress, frames int) service.Counts {
	return service.Counts{
		Planned: frames, Received: p.Received, Written: p.Written, OK: p.OK, Missing: p.Missing,
		CRCMismatch: p.CRCMismatch, Rejected: p.Rejected + p.OutOfRange,
		Dropped: p.Duplicate + p.Overflow,
	}
}
