// Package service is h5ingest's scan service: the JSON HTTP API under /v1/
// that a beamline control system drives, one scan after another, without
// restarting the receiver. Its OpenAPI 3 document, served at
// /openapi.json, is generated from the Go types by huma; clients are built
// on it.
//
// A control system arms a scan (a profile, overrides, a plan, a scan id and
// metadata), then waits for it (long poll or server-sent events at
// /v1/events), and may stop it (drain what is in flight, record the rest
// missing) or cancel it (close the file with what arrived). One scan runs
// at a time: arming a second while one is armed or running is a 409, not a
// queue.
//
// The package runs scans through a Runner, which the command provides; it
// knows nothing of detectors or files itself.
//
// What a request may reach is what the operator allowed: a request sets
// only the keys of Overrides over a profile the operator provides, and
// the Runner places its files (see serve.Runner). Before any operation,
// the guard refuses a request with a foreign Host or Origin, one without
// the token where the service has one, and a POST not declared JSON, so
// that no web page can change anything; Serve caps the connections, in
// all and per client. CheckAddr refuses to serve off loopback without a
// token.
package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// Runner prepares the scans the service runs. Prepare is called one call
// at a time, outside the service's lock, so that slow checks (a profile
// or a directory on a file system that does not answer) hold up no other
// request.
type Runner interface {
	// Prepare runs the pre-scan checks on an arm request and returns the
	// scan it would run, holding what the scan needs (its files, the
	// detector's port) from now on. A refusal is a *RefusedError listing
	// every failure. ctx ends at the arm's deadline or when its client
	// goes away; a Prepare that returns a scan after that has it released.
	Prepare(ctx context.Context, req ArmRequest) (Scan, error)
}

// Scan is one armed scan.
type Scan interface {
	// Run waits for the detector and writes the scan until it ends, is
	// stopped or ctx is cancelled (the cancel request: close the file
	// with what arrived), calling report with progress (from Run's
	// goroutine, at most a few times a second) and with each file
	// finalised. It returns the scan's result.
	Run(ctx context.Context, report Reporter) Result
	// Stop asks Run to take no more frames, write those in flight and
	// record the rest missing. It may be called from any goroutine, more
	// than once.
	Stop()
	// Release gives back what Prepare took, for a scan that will not
	// Run (its arm was abandoned); Run gives it back itself.
	Release()
}

// Reporter receives what a running scan says about itself.
type Reporter interface {
	// Progress reports the counts so far. Calls come from one goroutine
	// at a time.
	Progress(Counts)
	// FileFinalised reports a file closed under its final name.
	FileFinalised(File)
}

// RefusedError is a request the pre-scan checks refused, with every
// reason.
type RefusedError struct{ Reasons []string }

func (e *RefusedError) Error() string { return "scan refused: " + strings.Join(e.Reasons, "; ") }

// Config sets up a service.
type Config struct {
	// Token, when not empty, must be carried by every request under /v1/,
	// as "Authorization: Bearer TOKEN".
	Token string
	// AllowHosts are names besides the address it listens on by which
	// clients reach the service (its host name, a proxy's): a request
	// whose Host is none of them is refused.
	AllowHosts []string
	// Version is h5ingest's version, shown in the OpenAPI document.
	Version string
	// History is how many ended scans are kept for their status; 0 means 16.
	History int
	// PrepareTimeout bounds an arm's pre-scan checks; 0 means 30s.
	PrepareTimeout time.Duration
	// MaxConns bounds the connections Serve holds open, and
	// MaxConnsPerClient those from one client address; 0 means 64 and 16.
	MaxConns, MaxConnsPerClient int
	// Links, where set, are the receiver's links serve set up at
	// start-up: GET and PUT /v1/rdma.
	Links Links
	// Levels are the levels each codec takes, as the registry says: the
	// bounds of a request's output.level. Nil: 0 to 22.
	Levels []CodecLevels
	// Ended, where set, is called with each scan's final status once it
	// has ended and its event is published (serve logs it).
	Ended func(Status)
}

// CodecLevels are the compression levels a codec takes besides 0, its
// default.
type CodecLevels struct {
	Codec    string
	Min, Max int
}

// maxBody bounds every request body: an arm request is small.
const maxBody = 64 << 10

// CheckAddr refuses to serve addr (host:port) off loopback without a
// token: anything that changes state from another machine must carry one.
// A host name is resolved, and is loopback only where every address it
// resolves to is (localhost may be made to name another). With a token, a
// name of loopback and other addresses at once is refused too: serve
// listens on one address of a name (the first), and where that is
// loopback no other machine reaches it.
func CheckAddr(addr, token string) error {
	return checkAddr(addr, token, net.DefaultResolver.LookupNetIP)
}

// lookupTimeout bounds the resolution of a listen address's host name.
const lookupTimeout = 10 * time.Second

// checkAddr is CheckAddr resolving host names with lookup.
func checkAddr(addr, token string, lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("serve address %s: %w", addr, err)
	}
	offLoopback := fmt.Errorf("serve address %s is not loopback: give a token file (--token-file), which every request under /v1/ must then carry", addr)
	if host == "" {
		if token != "" {
			return nil
		}
		return offLoopback // every interface
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if token == "" && !ip.Unmap().IsLoopback() {
			return offLoopback
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	ips, err := lookup(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("serve address %s: %w", addr, err)
	}
	if len(ips) == 0 {
		return fmt.Errorf("serve address %s: %s resolves to no address", addr, host)
	}
	loopback := 0
	for _, ip := range ips {
		if ip.Unmap().IsLoopback() {
			loopback++
		}
	}
	switch {
	case token == "" && loopback < len(ips):
		return fmt.Errorf("serve address %s: %s resolves to %v, not only loopback: give a token file (--token-file), which every request under /v1/ must then carry, or listen on 127.0.0.1", addr, host, ips)
	case token != "" && loopback > 0 && loopback < len(ips):
		return fmt.Errorf("serve address %s: %s resolves to %v, loopback and not: serve listens on one address of a name, perhaps loopback, out of other machines' reach: listen on the address meant (0.0.0.0 for every one)", addr, host, ips)
	}
	return nil
}

// Service is the scan service: its state and its HTTP API.
type Service struct {
	runner Runner
	cfg    Config
	api    huma.API
	mux    *http.ServeMux
	events *broker

	mu        sync.Mutex
	current   *job            // the armed or running scan; nil when idle
	preparing string          // the scan id of an arm whose Prepare has not returned; "" for none
	closing   bool            // Drain was called: no more arms
	jobs      map[string]*job // by scan id: the current and the last ended
	ended     []string        // scan ids of ended jobs, oldest first

	started time.Time     // when New made it
	storage *storageProbe // asks a Storer for the free space
}

// A body's keys are judged as written: encoding/json would take "OUTPUT"
// for "output" (the last of the two winning), which huma would otherwise
// not check, so a key in other letter case is an unexpected property. Set
// once, before any request is validated.
func init() { huma.ValidateStrictCasing = true }

// New returns a service running scans through r.
func New(r Runner, cfg Config) *Service {
	if cfg.History <= 0 {
		cfg.History = 16
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.PrepareTimeout <= 0 {
		cfg.PrepareTimeout = 30 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 64
	}
	if cfg.MaxConnsPerClient <= 0 {
		cfg.MaxConnsPerClient = 16
	}
	s := &Service{runner: r, cfg: cfg, mux: http.NewServeMux(), events: newBroker(), jobs: map[string]*job{},
		started: time.Now().UTC(), storage: &storageProbe{}}
	hc := huma.DefaultConfig("h5ingest scan service", cfg.Version)
	hc.Info.Description = "Arm, wait for, stop and cancel h5ingest scans; follow them as server-sent events."
	hc.DocsPath = "" // no page that loads scripts from elsewhere
	hc.SchemasPath = ""
	hc.CreateHooks = nil // no $schema links to schemas it does not serve
	// registerDocuments serves the 3.1 document, and a 3.0 one that 3.0 tools read.
	hc.OpenAPIPath = ""
	hc.Servers = []*huma.Server{{URL: "/", Description: "This service: the scheme, host and port the document was read from."}}
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"token": {Type: "http", Scheme: "bearer", Description: "The service's token, when it has one (always, off loopback): every request under /v1/ carries it. /openapi.json, the status page and /metrics need none."},
	}
	hc.Formats = map[string]huma.Format{"application/json": jsonFormat, "json": jsonFormat}
	s.api = humago.New(s.mux, hc)
	s.register()
	s.boundLevels(cfg.Levels)
	s.documentGuard()
	return s
}

// Handler returns the service's HTTP handler: its API, and what Handle
// added, behind the guard. Other handlers (the status page, /metrics) may
// be added to its mux with Handle.
func (s *Service) Handler() http.Handler { return s.guard(s.mux) }

// Handle serves pattern with h beside the API.
func (s *Service) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// State is where a scan is.
type State string

// The states of a scan, in order; a scan ends in one of the last four.
const (
	Armed      State = "armed"      // waiting for the detector
	Running    State = "running"    // frames arriving
	Stopping   State = "stopping"   // stop asked: draining
	Cancelling State = "cancelling" // cancel asked: closing the file
	Done       State = "done"       // every planned frame good
	Incomplete State = "incomplete" // finished, with frames missing, corrupt or rejected
	Cancelled  State = "cancelled"  // cancelled: the file holds what arrived
	Failed     State = "failed"     // the scan could not be written as asked
)

func (st State) ended() bool {
	switch st {
	case Done, Incomplete, Cancelled, Failed:
		return true
	}
	return false
}

// job is one scan the service armed.
type job struct {
	id     string
	scan   Scan
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned

	cancelled atomic.Bool // a cancel request ended it

	mu     sync.Mutex
	status Status
}

func (j *job) snapshot() Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.status
	st.Files = append([]File{}, st.Files...) // [] in JSON, never null
	return st
}

// arm prepares and starts a scan, unless one is armed, running or being
// prepared. The pre-scan checks run outside the lock, for at most
// Config.PrepareTimeout; a scan whose client went away, or whose checks
// came back too late, is released, not armed.
func (s *Service) arm(ctx context.Context, req ArmRequest) (Status, error) {
	if err := checkText(req); err != nil {
		return Status{}, err
	}
	s.mu.Lock()
	err := s.armable(req.ScanID)
	if err == nil {
		s.preparing = req.ScanID
	}
	s.mu.Unlock()
	if err != nil {
		return Status{}, err
	}

	type prepared struct {
		scan Scan
		err  error
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PrepareTimeout)
	defer cancel()
	done := make(chan prepared, 1)
	go func() {
		scan, err := s.runner.Prepare(pctx, req)
		done <- prepared{scan, err}
	}()
	var p prepared
	select {
	case p = <-done:
	case <-pctx.Done():
		// Nobody will run what Prepare returns: release it when it does,
		// and only then take another arm, so that hung checks pile up no
		// goroutines.
		go func() {
			p := <-done
			if p.scan != nil {
				p.scan.Release()
			}
			s.mu.Lock()
			s.preparing = ""
			s.mu.Unlock()
		}()
		if ctx.Err() != nil {
			return Status{}, huma.Error400BadRequest("the client went away before the scan was armed: nothing armed")
		}
		return Status{}, huma.Error503ServiceUnavailable(fmt.Sprintf(
			"the pre-scan checks of scan %s took more than %v (a profile, directory or file system that does not answer?): nothing armed, and no other arm is taken until they end",
			req.ScanID, s.cfg.PrepareTimeout))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.preparing = ""
	if p.err != nil {
		var refused *RefusedError
		if errors.As(p.err, &refused) {
			details := make([]error, len(refused.Reasons))
			for i, r := range refused.Reasons {
				details[i] = &huma.ErrorDetail{Message: r}
			}
			return Status{}, huma.Error422UnprocessableEntity("the pre-scan checks refused the scan", details...)
		}
		return Status{}, huma.Error500InternalServerError("prepare the scan", p.err)
	}
	switch {
	case ctx.Err() != nil:
		p.scan.Release()
		return Status{}, huma.Error400BadRequest("the client went away before the scan was armed: nothing armed")
	case s.closing:
		p.scan.Release()
		return Status{}, huma.Error503ServiceUnavailable("the service is shutting down: nothing armed")
	}
	jctx, jcancel := context.WithCancel(context.Background())
	j := &job{id: req.ScanID, scan: p.scan, cancel: jcancel, done: make(chan struct{}),
		status: Status{ScanID: req.ScanID, State: Armed, ArmedAt: time.Now().UTC(), Counts: armedCounts(p.scan)}}
	s.current, s.jobs[req.ScanID] = j, j
	st := j.snapshot()
	s.events.publish(ArmedEvent(st))
	go s.run(jctx, j)
	return st, nil
}

// armable refuses an arm while a scan is armed, running or being
// prepared, an arm of a scan id used already, and any arm once the
// service drains. The caller holds s.mu.
func (s *Service) armable(id string) error {
	switch {
	case s.closing:
		return huma.Error503ServiceUnavailable("the service is shutting down: nothing armed")
	case s.current != nil:
		cur := s.current.snapshot()
		return huma.Error409Conflict(fmt.Sprintf("scan %s is %s: stop or cancel it, or wait for it, before arming another", cur.ScanID, cur.State))
	case s.preparing != "":
		return huma.Error409Conflict(fmt.Sprintf("scan %s is being armed (its pre-scan checks run): wait for its answer before arming another", s.preparing))
	}
	if old, ok := s.jobs[id]; ok {
		return huma.Error409Conflict(fmt.Sprintf("scan id %s was used by a scan that is %s: give each scan its own id", id, old.snapshot().State))
	}
	return nil
}

// run runs j's scan to its end.
func (s *Service) run(ctx context.Context, j *job) {
	defer close(j.done)
	res := j.scan.Run(ctx, &reporter{s: s, j: j})
	j.mu.Lock()
	j.status.State = res.State
	if res.State == "" || !res.State.ended() {
		j.status.State = Failed
	}
	j.status.Counts = res.Counts
	j.status.Error, j.status.ErrorKind, j.status.Remedy = res.Error, res.ErrorKind, res.Remedy
	if res.State == Incomplete && j.cancelled.Load() {
		// A cancel answered "cancelling" while the scan was already ending
		// (a stop's drain done): its file is what the cancel would have
		// left, and the scan ends as the answer said.
		j.status.State = Cancelled
	}
	if j.status.State == Cancelled && j.cancelled.Load() {
		j.status.Error = "" // the user's cancel is no error
	}
	j.status.Files = res.Files
	j.status.Notes = res.Notes
	j.status.EndedAt = time.Now().UTC()
	j.mu.Unlock()
	j.cancel()
	st := j.snapshot()
	s.mu.Lock()
	s.current = nil
	s.ended = append(s.ended, j.id)
	for len(s.ended) > s.cfg.History {
		delete(s.jobs, s.ended[0])
		s.ended = s.ended[1:]
	}
	s.mu.Unlock()
	if st.State == Failed {
		s.events.publish(FailedEvent(st))
	} else {
		s.events.publish(DoneEvent(st))
	}
	if s.cfg.Ended != nil {
		s.cfg.Ended(st)
	}
}

// reporter passes what a running scan says into its status and events.
type reporter struct {
	s         *Service
	j         *job
	first     bool      // the first frame was announced
	lastEvent time.Time // of the last progress event
}

// progressEvery bounds the progress events: at most a few a second.
const progressEvery = 250 * time.Millisecond

func (r *reporter) Progress(c Counts) {
	j := r.j
	j.mu.Lock()
	j.status.Counts = c
	if j.status.State == Armed && c.Received > 0 {
		j.status.State = Running
		j.status.StartedAt = time.Now().UTC()
	}
	j.mu.Unlock()
	if !r.first && c.Received > 0 {
		r.first = true
		st := j.snapshot()
		r.s.events.publish(FirstFrameEvent(st))
	}
	if now := time.Now(); now.Sub(r.lastEvent) >= progressEvery {
		r.lastEvent = now
		st := j.snapshot()
		r.s.events.publish(ProgressEvent(st))
	}
}

func (r *reporter) FileFinalised(f File) {
	j := r.j
	j.mu.Lock()
	j.status.Files = append(j.status.Files, f)
	j.mu.Unlock()
	r.s.events.publish(FileEvent{ScanID: j.id, File: f})
}

// find returns the job of a scan id.
func (s *Service) find(id string) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.jobs[id]; ok {
		return j, nil
	}
	return nil, huma.Error404NotFound(fmt.Sprintf("no scan %s (the service keeps the last %d)", id, s.cfg.History))
}

// stop asks the scan to drain and end.
func (s *Service) stop(id string, cancel bool) (Status, error) {
	j, err := s.find(id)
	if err != nil {
		return Status{}, err
	}
	j.mu.Lock()
	if j.status.State.ended() {
		st := j.status
		j.mu.Unlock()
		return st, huma.Error409Conflict(fmt.Sprintf("scan %s has ended (%s)", id, st.State))
	}
	if cancel {
		j.status.State = Cancelling
		j.cancelled.Store(true)
	} else if j.status.State != Cancelling {
		j.status.State = Stopping
	}
	j.mu.Unlock()
	// The answer says what the request set under way (stopping or
	// cancelling), taken before the scan is asked: a scan that ends at once
	// would otherwise answer with its end, which wait is for.
	st := j.snapshot()
	if cancel {
		j.cancel()
	} else {
		j.scan.Stop()
	}
	return st, nil
}

// wait waits up to timeout for the scan to end and returns its status.
func (s *Service) wait(ctx context.Context, id string, timeout time.Duration) (Status, error) {
	j, err := s.find(id)
	if err != nil {
		return Status{}, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-j.done:
	case <-t.C:
	case <-ctx.Done():
	}
	return j.snapshot(), nil
}

// list returns the scans the service keeps, the current one first.
func (s *Service) list() []Status {
	s.mu.Lock()
	jobs := make([]*job, 0, len(s.jobs))
	if s.current != nil {
		jobs = append(jobs, s.current)
	}
	for i := len(s.ended) - 1; i >= 0; i-- {
		jobs = append(jobs, s.jobs[s.ended[i]])
	}
	s.mu.Unlock()
	out := make([]Status, len(jobs))
	for i, j := range jobs {
		out[i] = j.snapshot()
	}
	return out
}

// Drain ends the service's work before the process exits (SIGTERM): from
// now on it arms no scan; the current scan, armed or running, goes on
// until it ends by itself (its plan reached, its sender done, a stop or
// cancel request) for up to timeout, then it is cancelled, writing the
// frames that arrived, and Drain returns an error wrapping
// ErrDrainTimeout once it has ended.
func (s *Service) Drain(timeout time.Duration) error {
	s.mu.Lock()
	s.closing = true
	j := s.current
	s.mu.Unlock()
	if j == nil {
		return nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-j.done:
		return nil
	case <-t.C:
		s.stop(j.id, true)
		<-j.done
		return fmt.Errorf("scan %s: %w %v: it was cancelled, and ended %s", j.id, ErrDrainTimeout, timeout, j.snapshot().State)
	}
}

// Interrupt makes the service arm no more scans and stops the current
// one, if any, as a stop request does: what an interrupt (Ctrl-C) asks,
// where SIGTERM lets the scan end by itself (Drain).
func (s *Service) Interrupt() {
	s.mu.Lock()
	s.closing = true
	j := s.current
	s.mu.Unlock()
	if j != nil {
		s.stop(j.id, false)
	}
}

// ErrDrainTimeout is wrapped by Drain's error when the running scan did
// not drain in time and was cancelled.
var ErrDrainTimeout = errors.New("the scan did not drain within the drain timeout of")
