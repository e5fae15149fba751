package scan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/instrument"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/receive"
	"h5ingest/status"
	"h5ingest/version"
)

// Observer is what a command shows of its scans while they run (Metrics:
// the status page, /status.json, /preview.png and Prometheus /metrics)
// and after (Report: an HTML page with the throughput over time). Its
// server starts with the first scan shown on it.
type Observer struct {
	Metrics string        // address to serve on: [HOST]:PORT, a lone port on loopback; "" for none
	Report  string        // file to write the report to after the last scan; "" for none
	Linger  time.Duration // after the last scan, keep serving Metrics this long

	mu  sync.Mutex
	obs *observer // made by the first scan
}

// NewServingObserver returns the observer of a server that runs scan after
// scan (h5ingest serve): each scan's metrics and page replace the last
// one's on its Handler, and no scan's end stops it or writes a report.
func NewServingObserver(log *zap.Logger) *Observer {
	reg := newRegistry()
	o := &Observer{}
	o.obs = &observer{flags: o, log: log, reg: reg, srv: status.NewServer(reg), started: time.Now(), persistent: true}
	return o
}

// newRegistry returns a metrics registry with the process's own series:
// the Go runtime's, the process's, and h5ingest_build_info.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "h5ingest_build_info", Help: "Always 1: its labels are h5ingest's version and the Go release it was built with.",
			ConstLabels: prometheus.Labels{"version": version.String(), "go": runtime.Version()}}, func() float64 { return 1 }))
	return reg
}

// ServiceView is what a serving observer shows of the service that runs
// its scans (ShowService): its state, the ends of its scans, its status.
type ServiceView struct {
	// States are the service's states, each with a series of
	// h5ingest_service_state from the start; State returns the one it is
	// in now.
	States []string
	State  func() string
	// Outcomes are the ends of a scan that h5ingest_scans_total counts
	// (ScanEnded), each with a series from the start.
	Outcomes []string
	// Status returns the service's status for /status.json and the page,
	// without paths, errors' text or images where trusted is false;
	// Trusted says whether a request may see them.
	Status  func(trusted bool) any
	Trusted func(*http.Request) bool
}

// ShowService makes a serving observer show the service that runs its
// scans: its state and its scans' ends in /metrics
// (h5ingest_service_state, h5ingest_scans_total), and its status on the
// page and in /status.json. Call it once, before serving; ScanEnded
// counts the ends.
func (o *Observer) ShowService(v ServiceView) {
	obs := o.obs
	for _, st := range v.States {
		obs.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "h5ingest_service_state",
			Help:        "1 for the state the scan service is in (idle, armed, running, stopping, cancelling, draining, error), 0 for the others.",
			ConstLabels: prometheus.Labels{"state": st}}, func() float64 {
			if v.State() == st {
				return 1
			}
			return 0
		}))
	}
	obs.scans = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "h5ingest_scans_total",
		Help: "Scans the service ran to their end, by outcome: done, incomplete, cancelled, failed."}, []string{"outcome"})
	for _, st := range v.Outcomes {
		obs.scans.WithLabelValues(st)
	}
	obs.reg.MustRegister(obs.scans)
	obs.srv.ShowService(v.Status, v.Trusted)
}

// ScanEnded counts the end of a scan of the service in
// h5ingest_scans_total, by its outcome (one of ServiceView.Outcomes).
func (o *Observer) ScanEnded(outcome string) {
	if o.obs != nil && o.obs.scans != nil {
		o.obs.scans.WithLabelValues(outcome).Inc()
	}
}

// Armed makes a serving observer show scan id from now on: the last
// scan's series leave /metrics and its modules the page at once, not
// when the new scan's detector connects.
func (o *Observer) Armed(id string) {
	if o == nil || o.obs == nil || !o.obs.persistent {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if id == o.obs.lastID {
		return
	}
	for _, last := range o.obs.last {
		o.obs.unshow(last)
	}
	o.obs.last, o.obs.lastID = nil, id
}

// Handler returns the status pages and metrics of a serving observer
// (NewServingObserver); nil for another.
func (o *Observer) Handler() http.Handler {
	if o.obs == nil || !o.obs.persistent {
		return nil
	}
	return o.obs.srv.Handler()
}

// listenAddr returns the address --metrics names: a lone port, with or
// without its colon, is on loopback.
func listenAddr(s string) (string, error) {
	if _, err := strconv.ParseUint(s, 10, 16); err == nil {
		s = ":" + s
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("--metrics %q: want [HOST]:PORT or PORT", s)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// observer is what a command shows of its scans: one metrics registry, the
// HTTP server (with --metrics) and the report (with --report).
type observer struct {
	flags    *Observer
	log      *zap.Logger
	reg      *prometheus.Registry
	srv      *status.Server // nil without --metrics
	started  time.Time
	monitors []*status.Monitor
	open     int // scans not finished
	// persistent is the observer of a server that runs scan after scan
	// (serve): each scan's metrics and page replace the last one's, and
	// no scan's end stops the server or writes a report.
	persistent bool
	last       []*scanWatch           // persistent: the modules of the scan shown now
	lastID     string                 // and its scan id
	scans      *prometheus.CounterVec // the service's scans by outcome (ShowService); nil for a command's
}

// Start starts the observer's server, if it has an address and has not
// started yet, so that a bad address fails before any scan.
func (o *Observer) Start(log *zap.Logger) error {
	_, err := o.start(log)
	return err
}

// start returns the command's observer, making it (and starting its
// server) on the first call; nil when neither Metrics nor Report is set.
func (o *Observer) start(log *zap.Logger) (*observer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.obs != nil {
		return o.obs, nil
	}
	if o.Metrics == "" && o.Report == "" {
		return nil, nil
	}
	if o.Report != "" {
		if fi, err := os.Stat(filepath.Dir(o.Report)); err != nil || !fi.IsDir() {
			return nil, Usage(fmt.Errorf("--report %s: no such directory", o.Report))
		}
	}
	reg := newRegistry()
	obs := &observer{flags: o, log: log, reg: reg, started: time.Now()}
	if o.Metrics != "" {
		addr, err := listenAddr(o.Metrics)
		if err != nil {
			return nil, Usage(err)
		}
		if obs.srv, err = status.Listen(addr, obs.reg); err != nil {
			return nil, err
		}
		log.Info("status page", zap.String("url", "http://"+obs.srv.Addr().String()+"/"))
	}
	o.obs = obs
	return obs, nil
}

// Close ends the observer after the command's scans: where a scan was
// shown on its server, it goes on serving the final figures for Linger
// first, so that a scraper sees them; then the server stops. The
// observer of a command that failed before its first scan stops at once.
func (o *Observer) Close() {
	o.mu.Lock()
	obs := o.obs
	o.obs = nil
	o.mu.Unlock()
	if obs == nil || obs.srv == nil {
		return
	}
	if len(obs.monitors) > 0 && o.Linger > 0 {
		obs.log.Info("serving the final figures", zap.Duration("for", o.Linger))
		time.Sleep(o.Linger)
	}
	obs.srv.Close()
}

// scanWatch instruments one scan. Open wraps every scan's stages (the
// counters cost nothing to speak of); Module.Observe shows them, when the
// command's flags ask for it.
type scanWatch struct {
	stages   *instrument.Stages
	scan     status.Scan
	pipeline *pipeline.Pipeline

	obs      *observer // nil: nobody watches
	module   int
	monitor  *status.Monitor
	progress progressCache
	// collectors are the scan's metrics beside its stages'.
	collectors []prometheus.Collector
}

// newScanWatch returns the instruments of a scan, not shown anywhere yet.
func newScanWatch() *scanWatch { return &scanWatch{stages: instrument.New()} }

// wrap returns the backend and codec maker, counted and timed.
func (w *scanWatch) wrap(b gpu.Backend, newCodec func() (compress.Codec, error)) (gpu.Backend, func() (compress.Codec, error)) {
	return w.stages.Backend(b), w.stages.NewCodec(newCodec)
}

// fallback returns what opens the backend open opens, counted and timed
// as wrap does the scan's own, so that the decode stage's figures go on
// once the scan's backend has lost its device; nil where open is nil.
func (w *scanWatch) fallback(open func() (gpu.Backend, error)) func() (gpu.Backend, error) {
	if open == nil {
		return nil
	}
	return func() (gpu.Backend, error) {
		b, err := open()
		if err != nil {
			return nil, err
		}
		return w.stages.Backend(b), nil
	}
}

// describe notes what the scan is, for the page and the report.
func (w *scanWatch) describe(p *pipeline.Pipeline, path string, plan plan.Plan, format frame.Format, backend, compression string) {
	w.pipeline = p
	w.scan = status.Scan{Output: path, Planned: plan.Frames(), Format: format.String(), Backend: backend, Compression: compression}
	if plan.Frames() > 0 {
		w.scan.Plan = plan.String()
	}
}

// Observe shows the scan of module on o: on its status server, in its
// report. Call it before Run.
func (r *Module) Observe(o *Observer, scanID string, module int) error {
	obs, err := o.start(r.log)
	if obs == nil || err != nil {
		return err
	}
	w := r.watch
	o.mu.Lock()
	obs.open++
	o.mu.Unlock()
	w.obs, w.module = obs, module
	scan := w.scan
	scan.ID, scan.Module = scanID, module
	if scan.ID == "" {
		scan.ID = strings.TrimSuffix(filepath.Base(scan.Output), filepath.Ext(scan.Output))
	}
	p := w.pipeline
	w.progress.p = p
	w.monitor = status.NewMonitor(scan, p.Progress, w.stages)
	if obs.persistent {
		obs.replace(w, scan.ID)
	}
	if err := w.stages.Register(obs.reg, module); err != nil {
		return err
	}
	reg := moduleMetrics{w}
	if obs.srv != nil {
		w.stages.Preview.Enable(instrument.PreviewInterval)
	}
	reg.gauge("h5ingest_scan_info", "The scan a module writes: always 1, its labels say which.",
		func() float64 { return 1 }, "scan", scan.ID, "output", scan.Output)
	prog := func(f func(pipeline.Progress) int) func() float64 {
		return func() float64 { return float64(f(w.progress.get())) }
	}
	reg.gauge("h5ingest_scan_frames", "Frames in the scan: the plan's count, or the frames seen so far when it has none.",
		func() float64 { return float64(p.Frames()) })
	reg.gauge("h5ingest_scan_elapsed_seconds", "Time since the scan started.",
		func() float64 { return w.progress.get().Elapsed.Seconds() })
	reg.counter("h5ingest_frames_received_total", "Frames with a good header, whatever came of them.",
		prog(func(p pipeline.Progress) int { return p.Received }))
	reg.counter("h5ingest_frames_written_total", "Frames written to the file (ok or with a CRC mismatch).",
		prog(func(p pipeline.Progress) int { return p.Written }))
	reg.gauge("h5ingest_scan_frames_planned", "Frames in the scan's plan, from its start; 0 when its length is not known.",
		func() float64 { return float64(w.scan.Planned) })
	reg.gauge("h5ingest_frames_pending", "Planned frames not received yet and not yet due (no received frame lies source.ring_slots or more beyond them); 0 once the scan ends.",
		prog(func(p pipeline.Progress) int { return p.Pending }))
	reg.gauge("h5ingest_frames_missing", "Frames not received that a received frame lies source.ring_slots or more beyond; once the scan ends, every frame not received.",
		prog(func(p pipeline.Progress) int { return p.Missing }))
	reg.counter("h5ingest_frames_discarded_total", "Frames that arrived but were not written because the scan was cancelled before it could write them (recorded missing).",
		prog(func(p pipeline.Progress) int { return p.Discarded }))
	for _, pr := range []struct {
		name string
		f    func(pipeline.Progress) int
	}{
		{"crc_mismatch", func(p pipeline.Progress) int { return p.CRCMismatch }},
		{"rejected", func(p pipeline.Progress) int { return p.Rejected }},
		{"duplicate", func(p pipeline.Progress) int { return p.Duplicate }},
		{"out_of_range", func(p pipeline.Progress) int { return p.OutOfRange }},
		{"not_frame", func(p pipeline.Progress) int { return p.NotFrame }},
		{"pipeline_full", func(p pipeline.Progress) int { return p.Overflow }},
	} {
		reg.counter("h5ingest_frame_problems_total", "Frames with a problem, by kind: written with a CRC mismatch, rejected (undecodable: recorded rejected), out of range (beyond the scan: not written), dropped as a duplicate or because the pipeline was full, bytes that were not a frame.",
			prog(pr.f), "problem", pr.name)
	}
	dir := filepath.Dir(scan.Output)
	reg.gauge("h5ingest_output_free_bytes", "Free bytes on the file system of the output file.", func() float64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return -1
		}
		return float64(st.Bavail) * float64(st.Bsize)
	})
	if obs.srv != nil {
		obs.srv.Add(w.monitor)
	}
	obs.monitors = append(obs.monitors, w.monitor)
	return nil
}

// statser is a source that counts what it received: a receive.Stream.
type statser interface{ Stats() receive.Stats }

// start wraps the source and sink and, when the scan is watched, starts
// sampling it.
func (w *scanWatch) start(src pipeline.Source, sink pipeline.Sink) (pipeline.Source, pipeline.Sink) {
	if w.obs == nil {
		return w.stages.Source(src), w.stages.Sink(sink)
	}
	if st, ok := src.(statser); ok {
		reg := moduleMetrics{w}
		reg.counter("h5ingest_fabric_frames_total", "Frames the fabric stream received.",
			func() float64 { return float64(st.Stats().Frames) })
		reg.counter("h5ingest_fabric_bytes_total", "Bytes the fabric stream received, headers included.",
			func() float64 { return float64(st.Stats().Bytes) })
		reg.counter("h5ingest_fabric_held_back_seconds_total", "Time every ring slot was in use, so that the sender was held back.",
			func() float64 { return st.Stats().HeldBack.Seconds() })
		w.monitor.SetHeldBack(func() time.Duration { return st.Stats().HeldBack })
		if st.Stats().Uncredited {
			// A front end that never waits: what it overran, skipped and
			// damaged, and how full its ring is.
			reg.counter("h5ingest_source_overrun_total", "Frames the front end wrote over before they were read whole: recorded missing.",
				func() float64 { return float64(st.Stats().Overrun) })
			reg.counter("h5ingest_source_gaps_total", "Frame numbers the front end skipped.",
				func() float64 { return float64(st.Stats().Gaps) })
			reg.counter("h5ingest_source_damaged_total", "Writes whose slot held no whole frame, or named a slot beyond the ring: not taken.",
				func() float64 { return float64(st.Stats().Damaged) })
			reg.counter("h5ingest_source_disordered_total", "Frame numbers that repeated or went back.",
				func() float64 { return float64(st.Stats().Disordered) })
			reg.gauge("h5ingest_source_ring_fill", "Fraction of the ring's slots holding frames not yet read.", func() float64 {
				r := st.Stats()
				if r.RingSlots == 0 {
					return 0
				}
				return float64(r.RingUsed) / float64(r.RingSlots)
			})
			reg.gauge("h5ingest_source_ring_slots", "Slots in the ring.", func() float64 { return float64(st.Stats().RingSlots) })
		} else if slots := w.scan.RingSlots; slots > 0 {
			// The ring the sender writes into, one frame a slot: its
			// capacity beside the frames it holds.
			reg.gauge("h5ingest_source_ring_slots", "Slots in the ring.", func() float64 { return float64(slots) })
			reg.gauge("h5ingest_source_ring_fill", "Fraction of the ring's slots holding frames not yet read.", func() float64 {
				return instrument.Value(w.stages.SourceInFlight) / float64(slots)
			})
		}
	}
	w.monitor.Start()
	return w.stages.Source(src), w.stages.Sink(sink)
}

// stop ends the scan's sampling.
func (w *scanWatch) stop() {
	if w.obs != nil {
		w.monitor.Stop()
	}
}

// finish stops sampling the scan and returns its stages' mean times
// (nil where nobody watches it) and, once the command's last scan is
// done, writes the report and returns its path.
func (w *scanWatch) finish(outcome string) (times *StageTimes, report string, err error) {
	if w.obs == nil {
		return nil, "", nil
	}
	w.monitor.Stop()
	st := w.stages
	mean := func(h prometheus.Histogram) time.Duration {
		return time.Duration(instrument.Snapshot(h).Mean() * float64(time.Second))
	}
	times = &StageTimes{Decode: mean(st.DecodeSeconds), Compress: mean(st.CompressSeconds), Write: mean(st.WriteSeconds)}
	report, err = w.obs.scanDone(outcome)
	return times, report, err
}

// close ends a scan that finish did not.
func (w *scanWatch) close() {
	if w.obs != nil {
		w.monitor.Stop()
		w.obs.scanDone("aborted")
	}
}

// scanDone notes the end of one scan; after the last, it writes the
// report and returns its path ("" for none). The server goes on until
// the Observer's Close.
func (o *observer) scanDone(outcome string) (report string, err error) {
	o.flags.mu.Lock()
	o.open--
	last := o.open == 0
	o.flags.mu.Unlock()
	if !last || o.persistent {
		return "", nil
	}
	if path := o.flags.Report; path != "" {
		if err := o.writeReport(path, outcome); err != nil {
			return "", err
		}
		return path, nil
	}
	return "", nil
}

func (o *observer) writeReport(path, outcome string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	r := status.Report{
		Command: "h5ingest " + strings.Join(os.Args[1:], " "), Started: o.started, Ended: time.Now(),
		Outcome: outcome, Monitors: o.monitors,
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return fmt.Errorf("report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("report %s: %w", path, err)
	}
	return nil
}

// outcome says in a line how a scan ended, for the report.
func outcome(srcErr error, p pipeline.Progress) string {
	switch {
	case srcErr != nil && !errors.Is(srcErr, context.Canceled):
		return "incomplete: the source stopped early: " + srcErr.Error()
	case errors.Is(srcErr, context.Canceled):
		return "incomplete: interrupted"
	case p.Problems() > 0:
		return fmt.Sprintf("incomplete: %d missing, %d with a CRC mismatch, %d rejected, %d beyond the scan", p.Missing, p.CRCMismatch, p.Rejected, p.OutOfRange)
	}
	return "complete: every planned frame is good"
}

// progressCache reads a pipeline's progress at most every 100 ms, so that
// a scrape reading many figures takes its lock once.
type progressCache struct {
	p    *pipeline.Pipeline
	mu   sync.Mutex
	at   time.Time
	last pipeline.Progress
}

func (c *progressCache) get() pipeline.Progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.at) > 100*time.Millisecond {
		c.last, c.at = c.p.Progress(), now
	}
	return c.last
}

// moduleMetrics registers metrics of one module's scan: each gets the
// label module beside those given.
type moduleMetrics struct{ w *scanWatch }

// labels returns the module label and the name, value pairs kv.
func (m moduleMetrics) labels(kv []string) prometheus.Labels {
	l := prometheus.Labels{"module": strconv.Itoa(m.w.module)}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return l
}

// gauge registers a gauge whose value f returns at scrape time; labels
// are name, value pairs. The names are the command's own, each registered
// once per module: a clash is a programming error, and panics.
func (m moduleMetrics) gauge(name, help string, f func() float64, labels ...string) {
	m.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: m.labels(labels)}, f))
}

// counter registers a counter whose value f returns at scrape time, as
// gauge does.
func (m moduleMetrics) counter(name, help string, f func() float64, labels ...string) {
	m.register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: m.labels(labels)}, f))
}

// register adds c to the observer's registry, kept so that a persistent
// observer can take it out when the next scan replaces this one.
func (m moduleMetrics) register(c prometheus.Collector) {
	m.w.obs.reg.MustRegister(c)
	m.w.collectors = append(m.w.collectors, c)
}

// replace makes w, of scan id, one a persistent observer shows: those of
// the last scan leave the registry and its page the server, those of
// other modules of the same scan stay (a serve of several modules).
func (o *observer) replace(w *scanWatch, id string) {
	if id != o.lastID || slices.ContainsFunc(o.last, func(l *scanWatch) bool { return l.module == w.module }) {
		for _, last := range o.last {
			o.unshow(last)
		}
		o.last = nil
	}
	o.last, o.lastID = append(o.last, w), id
}

// unshow takes the scan of a module, last, off the registry and the
// server.
func (o *observer) unshow(last *scanWatch) {
	last.stages.Unregister(o.reg, last.module)
	for _, c := range last.collectors {
		o.reg.Unregister(c)
	}
	if o.srv != nil {
		o.srv.Remove(last.monitor)
	}
	o.monitors = slices.DeleteFunc(o.monitors, func(m *status.Monitor) bool { return m == last.monitor })
}
