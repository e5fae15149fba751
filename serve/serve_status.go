package serve

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/preview"
	"h5ingest/scan"
	"h5ingest/service"
	"h5ingest/writer"
)

// ShowService makes the serving observer o show the scan service svc:
// its state and its scans' ends in /metrics (h5ingest_service_state,
// h5ingest_scans_total, each series there from the start), and its
// status on the page and in /status.json, without paths, errors' text
// or images for a reader svc does not trust (off loopback, without the
// token). Call it once, before serving; o.ScanEnded counts the ends.
func ShowService(o *scan.Observer, svc *service.Service) {
	var states, outcomes []string
	for _, st := range []service.State{service.Idle, service.Armed, service.Running, service.Stopping,
		service.Cancelling, service.Draining, service.ErrorState} {
		states = append(states, string(st))
	}
	for _, st := range []service.State{service.Done, service.Incomplete, service.Cancelled, service.Failed} {
		outcomes = append(outcomes, string(st))
	}
	o.ShowService(scan.ServiceView{States: states, State: func() string { return string(svc.State()) }, Outcomes: outcomes,
		Status: func(trusted bool) any { return svc.Status(trusted) }, Trusted: svc.Trusted})
}

// What the scan service shows of the Runner and its scans beside their
// counts: the modules and profiles (service.ModuleLister,
// service.ProfileLister), where scans are written (service.Storer), a
// scan's rates (service.RateReporter) and its latest image
// (service.Imager).

// Modules returns the modules this node receives; nil when it takes any
// profile of one module.
func (r *Runner) Modules() []int {
	if len(r.ModuleIDs) == 0 {
		return nil
	}
	return slices.Clone(r.ModuleIDs)
}

// Storage returns where scans go before the first is armed, and the free
// space there: the data root where the operator gave one, else the
// default profile's output directory.
func (r *Runner) Storage() service.Storage {
	dir := r.DataRoot
	if dir == "" {
		dir = config.Default().Output.Directory
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return storage(dir)
}

// storage returns the free space in dir for the process's user.
func storage(dir string) service.Storage {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return service.Storage{Directory: dir, FreeBytes: -1, Error: err.Error()}
	}
	return service.Storage{Directory: dir, FreeBytes: int64(st.Bavail) * st.Bsize}
}

// maxProfileFiles bounds the files of the profiles directory listed.
const maxProfileFiles = 1000

// ListProfiles returns the built-in profiles, then the files of the
// profiles directory that end in .yaml or .yml, named without it, as an
// arm names them. A profile that does not load is listed with its error.
func (r *Runner) ListProfiles() ([]service.ProfileInfo, error) {
	var out []service.ProfileInfo
	builtin := config.BuiltinNames()
	for _, name := range builtin {
		out = append(out, r.profileInfo(name, name, "built-in"))
	}
	if r.Profiles == "" {
		return out, nil
	}
	entries, err := os.ReadDir(r.Profiles)
	if err != nil {
		return nil, fmt.Errorf("profiles directory: %w", err)
	}
	for _, e := range entries[:min(len(entries), maxProfileFiles)] {
		ext := filepath.Ext(e.Name())
		name := strings.TrimSuffix(e.Name(), ext)
		if ext != ".yaml" && ext != ".yml" || name == "" || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(r.Profiles, e.Name())
		if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if slices.Contains(builtin, name) {
			out = append(out, service.ProfileInfo{Name: name, Source: "file", Modules: []int{},
				Error: fmt.Sprintf("%s: an arm naming %s gets the built-in profile of that name", e.Name(), name)})
			continue
		}
		if r.profilePath(name) != path { // x.yml beside x.yaml: an arm gets x.yaml
			continue
		}
		out = append(out, r.profileInfo(name, path, "file"))
	}
	return out, nil
}

// profileInfo loads the profile ref and says what it is.
func (r *Runner) profileInfo(name, ref, source string) service.ProfileInfo {
	info := service.ProfileInfo{Name: name, Source: source, Modules: []int{}}
	p, err := config.Load(ref, r.Stages.Names())
	if err != nil {
		info.Error = err.Error()
		return info
	}
	info.Description = p.Description
	for _, m := range p.Detector.Modules {
		info.Modules = append(info.Modules, m.ID)
	}
	return info
}

// profilePath returns the file of the profiles directory that an arm's
// profile name names: the name as given, or with .yaml or .yml added,
// whichever is a regular file first; the name as given when none is.
func (r *Runner) profilePath(name string) string {
	path := filepath.Join(r.Profiles, name)
	for _, p := range []string{path, path + ".yaml", path + ".yml"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return path
}

// ShowProfile returns the profile an arm naming name loads, merged over
// the defaults and the environment, with the serve's live stream, each
// key with where its value came from, as h5ingest profiles show prints it.
func (r *Runner) ShowProfile(name string) (service.ProfileDetail, error) {
	ref, source := name, "built-in"
	if !slices.Contains(config.BuiltinNames(), name) {
		if r.Profiles == "" || name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
			return service.ProfileDetail{}, fmt.Errorf("profile %q: not a built-in profile (h5ingest profiles list)%s: %w", name, profilesHint(r.Profiles), service.ErrNoProfile)
		}
		ref, source = r.profilePath(name), "file"
		if fi, err := os.Stat(ref); err != nil || !fi.Mode().IsRegular() {
			return service.ProfileDetail{}, fmt.Errorf("profile %q: neither built in nor a file of the profiles directory: %w", name, service.ErrNoProfile)
		}
	}
	p, sources, err := config.LoadLayers(config.Layers{Profile: ref, Names: r.Stages.Names()})
	if err != nil {
		return service.ProfileDetail{}, err
	}
	keys := ProfileKeys(p, sources, r.Stages.Names())
	if r.Stream != "" {
		for i := range keys {
			if keys[i].Key == "stream.address" {
				keys[i].Value, keys[i].From = fmt.Sprintf("%q", r.Stream), "serve --stream"
			}
		}
	}
	return service.ProfileDetail{Name: name, Description: p.Description, Source: source, Keys: keys}, nil
}

// ProfileKeys returns every key of a merged profile in the order of
// config.Keys, with its value as text and where it came from: what
// h5ingest profiles show prints. A key that names a stage has the names it
// may take in OneOf, empty (not nil) where none is registered.
func ProfileKeys(p config.Profile, sources config.Sources, names config.Names) []service.ProfileKey {
	values := p.Text()
	out := make([]service.ProfileKey, len(config.Keys))
	for i, k := range config.Keys {
		out[i] = service.ProfileKey{Key: k.Name, Value: values[k.Name], From: sources[k.Name]}
		if allowed, ok := names.Of(k.Name); ok {
			out[i].OneOf = append([]string{}, allowed...)
		}
	}
	return out
}

// scanView is what the service shows of one of its scans beside its
// counts: its rates, its latest image, where its files go. It holds the
// scan's Module only while the scan runs.
type scanView struct {
	mu     sync.Mutex
	module *scan.Module         // from the detector's connection to the end of Run
	scans  []*scan.Module       // every module's, by its place in the files, as they start (scan.AcquireOptions.OnModules)
	output string               // the scan's file, once Run has ended with one
	rates  service.RateReporter // the service's, where it takes rates
	meter  rateMeter            // of the progress reports
}

// reporting returns rep, reporting the scan's rates before each progress
// report where rep takes them (service.RateReporter).
func (v *scanView) reporting(rep service.Reporter) service.Reporter {
	rr, ok := rep.(service.RateReporter)
	if !ok {
		return rep
	}
	v.mu.Lock()
	v.rates = rr
	v.mu.Unlock()
	return rateReporting{Reporter: rep, v: v}
}

// shown notes the scan's Module, once the detector has connected.
func (v *scanView) shown(m *scan.Module) {
	v.mu.Lock()
	v.module = m
	v.mu.Unlock()
}

// current returns the scan's Module, from the detector's connection to
// the end of Run; nil otherwise.
func (v *scanView) current() *scan.Module {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.module
}

// started notes the modules' scans so far (scan.AcquireOptions.OnModules).
func (v *scanView) started(scans []*scan.Module) {
	v.mu.Lock()
	v.scans = slices.Clone(scans)
	v.mu.Unlock()
}

// modules returns the modules' scans so far, by their place in the
// scan's files: nil until one has started, and after the end of Run.
func (v *scanView) modules() []*scan.Module {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.scans)
}

// end notes the end of Run: the rates become the whole scan's, the latest
// image the file's last, and the Module is let go.
func (v *scanView) end() {
	v.mu.Lock()
	m, rr := v.module, v.rates
	v.module, v.scans = nil, nil
	if m != nil {
		v.output = m.Path()
	}
	v.mu.Unlock()
	if m != nil && rr != nil {
		rr.Rates(averageRates(m.Progress()))
	}
}

// rateReporting is a Reporter that reports the scan's rates before each
// progress report.
type rateReporting struct {
	service.Reporter
	v *scanView
}

func (r rateReporting) Progress(c service.Counts) {
	r.v.mu.Lock()
	m, rr := r.v.module, r.v.rates
	r.v.mu.Unlock()
	if m != nil {
		rr.Rates(r.v.meter.add(m.Progress(), time.Now()))
	}
	r.Reporter.Progress(c)
}

// rateMeter measures rates over the last rateSamples progress reports:
// about a second, at four reports a second. Its calls come from one
// goroutine at a time, as progress reports do.
type rateMeter struct {
	samples [rateSamples]rateSample
	n, next int
}

const rateSamples = 4

// rateSample is a scan's progress at one time.
type rateSample struct {
	at                time.Time
	received, written int
	raw, stored       int64
}

// add notes the progress p at now and returns the rates since the oldest
// sample kept.
func (m *rateMeter) add(p pipeline.Progress, now time.Time) service.Rates {
	s := rateSample{at: now, received: p.Received, written: p.Written, raw: p.RawBytes, stored: p.StoredBytes}
	oldest := s
	if m.n == rateSamples {
		oldest = m.samples[m.next]
	} else if m.n > 0 {
		oldest = m.samples[0]
	}
	m.samples[m.next] = s
	m.next = (m.next + 1) % rateSamples
	m.n = min(m.n+1, rateSamples)
	return rates(s.at.Sub(oldest.at), s.received-oldest.received, s.written-oldest.written, s.raw-oldest.raw, s.stored-oldest.stored)
}

// averageRates returns the rates of a whole scan.
func averageRates(p pipeline.Progress) service.Rates {
	return rates(p.Elapsed, p.Received, p.Written, p.RawBytes, p.StoredBytes)
}

// rates returns the rates of frames and bytes over d.
func rates(d time.Duration, received, written int, raw, stored int64) service.Rates {
	sec := d.Seconds()
	if sec <= 0 {
		return service.Rates{}
	}
	const mb = 1e6
	return service.Rates{
		FramesPerSecond: float64(received) / sec, WrittenPerSecond: float64(written) / sec,
		ReceivedMBPerSecond: float64(raw) / mb / sec, StoredMBPerSecond: float64(stored) / mb / sec,
		WindowSeconds: sec,
	}
}

// previewWanted is how long after a look at a running scan's image its
// decode stage goes on keeping images for the preview.
const previewWanted = 5 * time.Second

// fileImageKey is the key of an ended scan's image, the last in its file;
// a running scan's keys count the images kept, far below it.
const fileImageKey = 1 << 63

// LatestImage returns the latest image of the scan (service.Imager):
// while it runs, the latest its decode stage kept for the preview (a few
// a second while someone looks); once it has ended, the last frame
// written to its file.
func (s *serveScan) LatestImage(have uint64) (preview.Frame, uint64, uint64, error) {
	s.view.mu.Lock()
	m, out := s.view.module, s.view.output
	s.view.mu.Unlock()
	switch {
	case m != nil:
		p := m.Preview()
		p.WantUntil(time.Now().Add(previewWanted))
		if seq, _ := p.Seq(); seq == 0 || seq == have {
			return preview.Frame{}, 0, seq, nil
		}
		img := p.Latest(nil)
		f := img.Format
		return preview.Frame{Data: img.Image, Height: f.Height(), Width: f.Width(), ElemSize: f.PixelSize()}, img.Number, img.Seq, nil
	case out == "":
		return preview.Frame{}, 0, 0, nil
	case have == fileImageKey:
		return preview.Frame{}, 0, fileImageKey, nil
	}
	n, err := lastWritten(out)
	if n < 0 || errors.Is(err, os.ErrNotExist) {
		return preview.Frame{}, 0, 0, nil
	}
	if err != nil {
		return preview.Frame{}, 0, 0, err
	}
	img, err := scan.ReadImage(s.stages, out, n)
	if err != nil {
		return preview.Frame{}, 0, 0, err
	}
	return img.Frame, uint64(n), fileImageKey, nil
}

// lastWritten returns the index of the last frame with an image in the
// module file at path; -1 when none has.
func lastWritten(path string) (int, error) {
	if _, err := os.Stat(path); err != nil {
		return -1, err
	}
	r, err := writer.OpenPlain(path)
	if err != nil {
		return -1, err
	}
	defer r.Close()
	records, err := r.Records()
	if err != nil {
		return -1, err
	}
	for i := min(len(records), r.Frames) - 1; i >= 0; i-- {
		if frame.Written(records[i].Status) {
			return i, nil
		}
	}
	return -1, nil
}

// Storage returns the directory of the scan's files and the free space
// there (service.Storer).
func (s *serveScan) Storage() service.Storage {
	if len(s.files.Modules) == 0 {
		return service.Storage{FreeBytes: -1, Error: "the scan has no file"}
	}
	return storage(filepath.Dir(s.files.Modules[0].Path))
}
