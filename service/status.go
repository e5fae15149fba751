package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// The states of the service, as GET /v1/status names them: a scan's while
// one is armed, running or stopping (Armed, Running, Stopping), else these.
const (
	Idle       State = "idle"     // no scan armed or running; the last, if any, did not fail
	ErrorState State = "error"    // the last scan failed, and none has been armed since
	Draining   State = "draining" // the process ends (SIGTERM): no scan is armed; the running one may end first
)

// APIVersion is the version of the API: its paths start with /v1.
const APIVersion = "v1"

// Rates are how fast a scan goes: over about the last second while it
// runs, over the whole scan once it has ended.
type Rates struct {
	FramesPerSecond     float64 `json:"frames_per_second" doc:"Frames received a second."`
	WrittenPerSecond    float64 `json:"written_per_second" doc:"Frames written to the file a second."`
	ReceivedMBPerSecond float64 `json:"received_mb_per_second" doc:"Detector payload received, in MB (10^6 bytes) a second, counted as its frames are written."`
	StoredMBPerSecond   float64 `json:"stored_mb_per_second" doc:"Bytes stored in the file, compressed, in MB a second."`
	WindowSeconds       float64 `json:"window_seconds" doc:"The time the rates are measured over: about a second while the scan runs, the whole scan once it has ended; 0 before the first measure."`
}

// RateReporter is a Reporter that also takes a scan's rates. The service's
// Reporter is one: a Scan that measures its rates finds it by type
// assertion and reports them before each Progress.
type RateReporter interface {
	// Rates reports the scan's rates, from the goroutine that calls
	// Progress.
	Rates(Rates)
}

// Rates implements RateReporter.
func (r *reporter) Rates(x Rates) {
	r.j.mu.Lock()
	r.j.status.Rates = x
	r.j.mu.Unlock()
}

// Storage is where scans are written and the room left there.
type Storage struct {
	Directory string `json:"directory" doc:"The directory the current or last scan writes to; before the first scan, the default profile's."`
	FreeBytes int64  `json:"free_bytes" doc:"Bytes free for the service's user there; -1 when not known."`
	Error     string `json:"error,omitempty" doc:"Why the free space is not known."`
}

// Storer is a Runner or a Scan that says where its scans are written
// (optional): a Scan the directory of its files, a Runner where scans go
// before the first is armed. Storage may be slow (a hung mount): the
// service waits for it a bounded time.
type Storer interface {
	Storage() Storage
}

// ModuleLister is a Runner that says which detector modules it receives
// (optional).
type ModuleLister interface {
	// Modules returns the module ids; nil when the service takes any
	// profile of one module, whichever its id.
	Modules() []int
}

// HealthReporter is a Runner with conditions of its own for the
// service's health and status (optional): problems make the service
// unhealthy; warnings do not (it still takes scans, in a lesser way: on
// the CPU once its GPU is lost). Health must answer at once.
type HealthReporter interface {
	Health() (problems, warnings []string)
}

// LastError is the error of the last scan that ended with one.
type LastError struct {
	ScanID string    `json:"scan_id"`
	Error  string    `json:"error"`
	At     time.Time `json:"at" doc:"When the scan ended."`
}

// ServiceStatus is the state of the service as a whole, in the manner of
// a detector's status (SIMPLON's status/state).
type ServiceStatus struct {
	State         State      `json:"state" enum:"idle,armed,running,stopping,error,draining" doc:"idle: no scan armed or running; armed, running, stopping: the current scan's state; error: the last scan failed and none was armed since; draining: the service is ending (SIGTERM) and arms no scan, while the running one, if any, may end first."`
	Version       string     `json:"version" doc:"h5ingest's version."`
	StartedAt     time.Time  `json:"started_at" doc:"When the service started."`
	UptimeSeconds float64    `json:"uptime_seconds"`
	Modules       []int      `json:"modules" nullable:"false" doc:"The detector modules this service receives; empty: any profile of one module."`
	Scan          *Status    `json:"scan,omitempty" doc:"The current scan, with its counts and rates; absent when idle."`
	LastScan      *Status    `json:"last_scan,omitempty" doc:"The last scan that ended, if the service keeps one."`
	LastError     *LastError `json:"last_error,omitempty" doc:"The last scan that ended with an error, of those the service keeps."`
	Storage       *Storage   `json:"storage,omitempty" doc:"Where scans are written and the room there; absent when the service cannot tell."`
	Warnings      []string   `json:"warnings,omitempty" doc:"Conditions of the service that health reports, its problems and warnings, e.g. a GPU lost: scans decode on the CPU; absent when none."`
}

// Health is the answer to a monitoring system: whether the service can
// take a scan, and if not, why.
type Health struct {
	Healthy  bool     `json:"healthy"`
	State    State    `json:"state" enum:"idle,armed,running,stopping,error,draining"`
	Problems []string `json:"problems" nullable:"false" doc:"What makes it unhealthy: the last scan failed, the free space where scans are written is not known or nil, its GPU is lost and it exits."`
	Warnings []string `json:"warnings" nullable:"false" doc:"What it should be told of that leaves it healthy: its GPU is lost, and scans decode on the CPU until it restarts."`
}

// VersionInfo says which h5ingest and which API answer.
type VersionInfo struct {
	Version string `json:"version" doc:"h5ingest's version."`
	API     string `json:"api" doc:"The API's version: its paths start with /v1."`
	Go      string `json:"go" doc:"The Go release h5ingest was built with."`
}

type serviceStatusOutput struct{ Body ServiceStatus }

type healthOutput struct {
	Status int
	Body   Health
}

type versionOutput struct{ Body VersionInfo }

// storageWait bounds how long a status request waits for the free space.
const storageWait = 2 * time.Second

// registerStatus registers what tells a control system and a monitoring
// system about the service as a whole: its status, health and version,
// the profiles an arm may name, a scan's latest image, and the OpenAPI
// documents.
func (s *Service) registerStatus() {
	started, storage := s.started, s.storage
	huma.Register(s.api, huma.Operation{
		OperationID: "get-status", Method: http.MethodGet, Path: "/v1/status",
		Summary:     "The service's state, version, current scan with its rates, last error and free space",
		Description: "idle, armed, running, stopping or error (the last scan failed and none was armed since).",
	}, func(ctx context.Context, in *struct{}) (*serviceStatusOutput, error) {
		return &serviceStatusOutput{s.serviceStatus(started, storage)}, nil
	})
	healthSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[Health](), true, "")
	huma.Register(s.api, huma.Operation{
		OperationID: "get-health", Method: http.MethodGet, Path: "/v1/health",
		Summary:     "Whether the service can take a scan: 200, or 503 with the problems",
		Description: "For monitoring: 503 when the last scan failed (until the next is armed), the free space where scans are written is not known or nil, or the service exits to be restarted (its GPU lost, with --on-gpu-lost exit); warnings name what leaves it healthy but lesser (its GPU lost, scans decode on the CPU).",
		Responses: map[string]*huma.Response{
			"503": {Description: "Unhealthy", Content: map[string]*huma.MediaType{"application/json": {Schema: healthSchema}}},
		},
	}, func(ctx context.Context, in *struct{}) (*healthOutput, error) {
		st := s.serviceStatus(started, storage)
		h := Health{Healthy: true, State: st.State, Problems: []string{}, Warnings: []string{}}
		if r, ok := s.runner.(HealthReporter); ok {
			problems, warnings := r.Health()
			h.Problems, h.Warnings = append(h.Problems, problems...), append(h.Warnings, warnings...)
		}
		if st.State == ErrorState && st.LastError != nil {
			h.Problems = append(h.Problems, fmt.Sprintf("scan %s failed: %s", st.LastError.ScanID, st.LastError.Error))
		}
		switch d := st.Storage; {
		case d == nil:
		case d.Error != "" && d.Directory == "":
			h.Problems = append(h.Problems, "free space where scans are written: "+d.Error)
		case d.Error != "":
			h.Problems = append(h.Problems, fmt.Sprintf("free space of %s: %s", d.Directory, d.Error))
		case d.FreeBytes == 0:
			h.Problems = append(h.Problems, d.Directory+" is full")
		}
		out := &healthOutput{Status: http.StatusOK, Body: h}
		if len(h.Problems) > 0 {
			out.Status, out.Body.Healthy = http.StatusServiceUnavailable, false
		}
		return out, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "get-version", Method: http.MethodGet, Path: "/v1/version",
		Summary: "h5ingest's version and the API's",
	}, func(ctx context.Context, in *struct{}) (*versionOutput, error) {
		return &versionOutput{VersionInfo{Version: s.cfg.Version, API: APIVersion, Go: runtime.Version()}}, nil
	})
	s.registerProfiles()
	s.registerPreview()
	s.registerDocuments()
}

// serviceState returns the service's state from its current scan and
// its last ended one (either nil where there is none), and whether it
// drains.
func serviceState(cur, last *Status, closing bool) State {
	switch {
	case closing:
		return Draining
	case cur != nil && !cur.State.ended():
		return cur.State
	case cur == nil && last != nil && last.State == Failed:
		return ErrorState
	}
	return Idle // or a scan between Run's return and the service's bookkeeping
}

// serviceStatus returns the service's status.
func (s *Service) serviceStatus(started time.Time, storage *storageProbe) ServiceStatus {
	s.mu.Lock()
	cur, closing := s.current, s.closing
	var last *job
	ended := make([]*job, 0, len(s.ended))
	for i := len(s.ended) - 1; i >= 0; i-- {
		ended = append(ended, s.jobs[s.ended[i]])
	}
	if len(ended) > 0 {
		last = ended[0]
	}
	s.mu.Unlock()

	now := time.Now().UTC()
	st := ServiceStatus{State: Idle, Version: s.cfg.Version, StartedAt: started, UptimeSeconds: now.Sub(started).Seconds(), Modules: []int{}}
	if m, ok := s.runner.(ModuleLister); ok {
		st.Modules = append(st.Modules, m.Modules()...)
	}
	if r, ok := s.runner.(HealthReporter); ok {
		problems, warnings := r.Health()
		st.Warnings = slices.Concat(problems, warnings)
	}
	if cur != nil {
		c := cur.snapshot()
		st.Scan = &c
	}
	if last != nil {
		l := last.snapshot()
		st.LastScan = &l
	}
	st.State = serviceState(st.Scan, st.LastScan, closing)
	for _, j := range ended {
		if e := j.snapshot(); e.Error != "" {
			st.LastError = &LastError{ScanID: e.ScanID, Error: e.Error, At: e.EndedAt}
			break
		}
	}
	var from Storer
	for _, j := range []*job{cur, last} {
		if j == nil {
			continue
		}
		if sc, ok := j.scan.(Storer); ok {
			from = sc
			break
		}
	}
	if from == nil {
		from, _ = s.runner.(Storer)
	}
	if from != nil {
		d := storage.get(from, storageWait)
		st.Storage = &d
	}
	return st
}

// storageProbe asks a Storer for the free space with a deadline, one
// question at a time: while one is unanswered (a hung mount), the next
// status says so rather than ask again.
type storageProbe struct {
	mu      sync.Mutex
	pending chan Storage // the unanswered question's; nil when none
}

// errNoAnswer is the free space's error while a question is unanswered.
var errNoAnswer = errors.New("the file system has not answered")

func (p *storageProbe) get(from Storer, wait time.Duration) Storage {
	p.mu.Lock()
	ch := p.pending
	if ch == nil {
		ch = make(chan Storage, 1)
		p.pending = ch
		go func() { ch <- from.Storage() }()
	}
	p.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case d := <-ch:
		p.mu.Lock()
		p.pending = nil
		p.mu.Unlock()
		return d
	case <-t.C:
		return Storage{FreeBytes: -1, Error: fmt.Sprintf("%v in %v", errNoAnswer, wait)}
	}
}
