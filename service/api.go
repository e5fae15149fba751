package service

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// ArmRequest is what a control system sends to arm a scan. A scan id and
// an output file name are each one path element of letters, digits, '.',
// '_' and '-', not starting with a dot, so that no name from a request
// leaves the output directory.
type ArmRequest struct {
	Profile string `json:"profile" minLength:"1" maxLength:"4096" doc:"A built-in profile's name (h5ingest profiles list) or a file name in serve's profiles directory."`
	// Overrides are the profile keys a request may set over the profile.
	Overrides *Overrides `json:"overrides,omitempty" doc:"The profile keys a request may set over the profile; any other key is refused. The detector, the receiver's address and port, overwriting, the status page and the stream's endpoint are the operator's."`
	Plan      *Plan      `json:"plan,omitempty" doc:"The scan plan; without one, the profile's."`
	ScanID    string     `json:"scan_id" minLength:"1" maxLength:"128" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$" patternDescription:"one path element: letters, digits, '.', '_', '-'" doc:"The scan's id: names its files through the profile's output template, and its stream's series."`
	Output    string     `json:"output,omitempty" maxLength:"200" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$" patternDescription:"one path element: letters, digits, '.', '_', '-'" doc:"File name in the output directory, instead of the template. No request replaces a file: a name that exists is refused."`
	// Metadata lands in the file.
	Title        string   `json:"title,omitempty" maxLength:"1024" doc:"NeXus /entry/title."`
	Sample       string   `json:"sample,omitempty" maxLength:"1024" doc:"NeXus /entry/sample/name."`
	ExperimentID string   `json:"experiment_identifier,omitempty" maxLength:"256" doc:"NeXus /entry/experiment_identifier (proposal or experiment number)."`
	UserMetadata Metadata `json:"user_metadata,omitempty" doc:"Any JSON object: kept in the file under an NXcollection, each value with its JSON type (a whole number written without a fraction or exponent is an integer)."`
}

// Overrides are the profile keys a request may set over its profile, and
// the only ones: how the scan's file is named, laid out and compressed,
// where under serve's data root it goes, and how its live stream is
// thinned. Everything else (the detector, the receiver's address and port,
// output.overwrite, status.*, stream.address) is the operator's, in the
// profile and on serve's command line. They nest as a profile's keys do:
// {"output": {"compression": "bslz4"}} sets output.compression.
type Overrides struct {
	Output *OutputOverrides `json:"output,omitempty"`
	Stream *StreamOverrides `json:"stream,omitempty"`
}

// OutputOverrides are the keys of a profile's output a request may set.
type OutputOverrides struct {
	Directory   *string `json:"directory,omitempty" minLength:"1" maxLength:"1024" doc:"The output directory, under serve's data root (--data-root): a path from it, or an absolute one within it, symbolic links resolved. Refused where serve has no data root: the profile's directory stands."`
	Template    *string `json:"template,omitempty" maxLength:"200" pattern:"^[A-Za-z0-9_{}-][A-Za-z0-9._{}-]*\\.h5$" patternDescription:"one path element ending in .h5, of letters, digits, '.', '_', '-' and {scan}, {date}, {module}" doc:"File name of the scan: {scan} is the scan id, {date} the date (YYYYMMDD), {module} the module id."`
	Layout      *string `json:"layout,omitempty" maxLength:"64" doc:"File layout, e.g. nxtomo or cxi (h5ingest profiles names)."`
	Compression *string `json:"compression,omitempty" maxLength:"64" doc:"Chunk compression, e.g. bslz4, bszstd, lz4, deflate or none."`
	Level       *int    `json:"level,omitempty" minimum:"0" maximum:"22" doc:"Compression level; 0: the codec's default."`
}

// StreamOverrides are the keys of a profile's live stream a request may
// set: its thinning, not its endpoint.
type StreamOverrides struct {
	Every   *int     `json:"every,omitempty" minimum:"1" maximum:"10000000" doc:"Stream every Nth image, for previews."`
	MaxRate *float64 `json:"max_rate,omitempty" minimum:"0" maximum:"1000000" doc:"Stream at most this many images a second; 0: no limit."`
}

// Keys returns the keys o sets, as Go values (text, whole numbers,
// numbers), each with the request field that set it.
func (o *Overrides) Keys() []OverrideKey {
	var keys []OverrideKey
	add := func(key string, set bool, v func() any) {
		if set {
			keys = append(keys, OverrideKey{Key: key, Field: "overrides." + key, Value: v()})
		}
	}
	if o != nil && o.Output != nil {
		out := o.Output
		add("output.directory", out.Directory != nil, func() any { return *out.Directory })
		add("output.template", out.Template != nil, func() any { return *out.Template })
		add("output.layout", out.Layout != nil, func() any { return *out.Layout })
		add("output.compression", out.Compression != nil, func() any { return *out.Compression })
		add("output.level", out.Level != nil, func() any { return *out.Level })
	}
	if o != nil && o.Stream != nil {
		st := o.Stream
		add("stream.every", st.Every != nil, func() any { return *st.Every })
		add("stream.max_rate", st.MaxRate != nil, func() any { return *st.MaxRate })
	}
	return keys
}

// OverrideKey is one profile key a request sets.
type OverrideKey struct {
	Key   string // the profile key, e.g. "output.level"
	Field string // the request field, e.g. "overrides.output.level"
	Value any
}

// Plan is a scan plan: counts of darks, flats and projections in that
// order, or a sequence, and the rotation's angles.
type Plan struct {
	Darks       int      `json:"darks,omitempty" minimum:"0" maximum:"10000000"`
	Flats       int      `json:"flats,omitempty" minimum:"0" maximum:"10000000"`
	Projections int      `json:"projections,omitempty" minimum:"0" maximum:"10000000"`
	Sequence    string   `json:"sequence,omitempty" maxLength:"4096" doc:"Frames in order as kind:count, e.g. flats:20,darks:10,projections:1800,flats:20; replaces the counts."`
	AngleStart  *float64 `json:"angle_start,omitempty" minimum:"-360000" maximum:"360000" doc:"Rotation angle of the first projection, degrees (a thousand turns either way at most); absent, the profile's."`
	AngleEnd    *float64 `json:"angle_end,omitempty" minimum:"-360000" maximum:"360000" doc:"Rotation angle the projections stop short of, degrees (a thousand turns either way at most); absent, the profile's."`
}

// Counts are a scan's frame counts so far. While a scan runs, every
// planned frame is ok, crc_mismatch, rejected, missing or pending, or on
// its way to the file; once it ends, pending is 0. Every frame received is
// written (ok, crc_mismatch), rejected, dropped or discarded.
type Counts struct {
	Planned     int `json:"planned" doc:"Frames in the plan, from the arming; 0 when the scan's length is not known."`
	Received    int `json:"received" doc:"Frames with a good header."`
	Written     int `json:"written" doc:"Frames written to the file."`
	OK          int `json:"ok"`
	Pending     int `json:"pending" doc:"Planned frames not received yet and not yet due: no later frame has passed them by the gap (docs/frames.md). 0 once the scan ends."`
	Missing     int `json:"missing" doc:"Frames not received that a later frame has passed by the gap, and once the scan ends every frame not received."`
	CRCMismatch int `json:"crc_mismatch"`
	Rejected    int `json:"rejected" doc:"Frames of the plan that could not be decoded, recorded rejected: ok, crc_mismatch, rejected and missing add up to planned."`
	Dropped     int `json:"dropped" doc:"Duplicates, frames beyond the plan (out of range), frames dropped because the pipeline was full."`
	Discarded   int `json:"discarded" doc:"Frames that arrived but could not be written before the file closed (a cancel or drain that could not finish): the log says why."`
}

// Planner is a Scan that knows its planned frames when it is armed: its
// status counts them, all pending, from the arming rather than from the
// first frame.
type Planner interface {
	Planned() int
}

// armedCounts returns the counts of a scan just armed.
func armedCounts(sc Scan) Counts {
	p, ok := sc.(Planner)
	if !ok {
		return Counts{}
	}
	n := p.Planned()
	return Counts{Planned: n, Pending: n}
}

// File is one file a scan wrote.
type File struct {
	Path     string `json:"path"`
	Module   int    `json:"module" doc:"The detector module it holds; -1 for a master file."`
	Verified bool   `json:"verified" doc:"h5ingest verify found every chunk it holds intact."`
	Error    string `json:"error,omitempty" doc:"Why it did not verify."`
}

// Result is how a scan ended.
type Result struct {
	State  State
	Counts Counts
	Files  []File
	Error  string
	// ErrorKind and Remedy, where the Scan knows them, are the cause of
	// Error an operator can mend and what to do (Status.ErrorKind).
	ErrorKind, Remedy string
	Notes             []Note
}

// Note is a sentence a scan has for its user beside its counts: a
// warning, or what became of some of its frames.
type Note struct {
	Kind   string `json:"kind" doc:"What the note is about: warning, info, interrupted, source stopped, beyond the scan, no frame, never connected, refused, short, dropped or failed."`
	Module *int   `json:"module,omitempty" doc:"The module the note is about; absent where it is about the scan as a whole or its master file."`
	Text   string `json:"text" doc:"The sentence, as the h5ingest command prints it."`
}

// Status is a scan's state and counts.
type Status struct {
	ScanID    string    `json:"scan_id"`
	State     State     `json:"state" enum:"armed,running,stopping,cancelling,done,incomplete,cancelled,failed"`
	Counts    Counts    `json:"counts"`
	Rates     Rates     `json:"rates" doc:"How fast the scan goes: over about the last second while it runs, over the whole scan once it has ended."`
	Files     []File    `json:"files" nullable:"false"`
	Error     string    `json:"error,omitempty"`
	ErrorKind string    `json:"error_kind,omitempty" doc:"Of a failed scan whose cause an operator can mend, that cause in a few words: disk full, disk quota exceeded, file too large, read-only file system, permission denied, directory gone, input/output error, port taken, detector silent."`
	Remedy    string    `json:"remedy,omitempty" doc:"What to do about error_kind."`
	Notes     []Note    `json:"notes,omitempty" doc:"Once the scan has ended: its warnings and what became of some of its frames (a module that never connected, a live stream that did not end cleanly), as the command prints them beside its summary."`
	ArmedAt   time.Time `json:"armed_at"`
	StartedAt time.Time `json:"started_at,omitzero" doc:"When the first frame arrived."`
	EndedAt   time.Time `json:"ended_at,omitzero"`

	// Modules are the counts of each module of a scan of several, or of
	// one whose link's front end never waits.
	Modules []ModuleCounts `json:"modules,omitempty" doc:"Each module's counts, for a scan of several modules (serve --modules) or one over roce; counts is their sum."`
}

// The events of /v1/events, one type each, as server-sent events name
// them: each but file_finalised carries the scan's status.
type (
	// ArmedEvent: a scan was armed and waits for the detector.
	ArmedEvent Status
	// FirstFrameEvent: the first frame of a scan arrived.
	FirstFrameEvent Status
	// ProgressEvent: a scan's counts, a few times a second at most.
	ProgressEvent Status
	// DoneEvent: a scan ended, in any state but failed.
	DoneEvent Status
	// FailedEvent: a scan could not be written as asked.
	FailedEvent Status
)

// FileEvent is the data of the file_finalised event: a file closed under
// its final name, and whether it verified.
type FileEvent struct {
	ScanID string `json:"scan_id"`
	File   File   `json:"file"`
}

// eventTypes maps the event names to their data's types.
var eventTypes = map[string]any{
	"armed": ArmedEvent{}, "first_frame": FirstFrameEvent{}, "progress": ProgressEvent{},
	"file_finalised": FileEvent{}, "done": DoneEvent{}, "failed": FailedEvent{},
}

type armInput struct {
	Body ArmRequest
}

type idInput struct {
	ID string `path:"id" maxLength:"128" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"`
}

// waitInput is a wait for a scan. Its timeout is read as text, so that
// what is no number (NaN, Inf, 0x10) is refused naming the parameter;
// waitTimeout documents it as the number it is.
type waitInput struct {
	ID      string `path:"id" maxLength:"128" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"`
	Timeout string `query:"timeout" default:"30" maxLength:"32"`
}

// waitTimeout is the wait's timeout as the OpenAPI document gives it.
var waitTimeout = &huma.Param{Name: "timeout", In: "query",
	Description: "Seconds to wait for the scan to end, 0 to 600, a JSON number (30, 2.5, 1e-3).",
	Schema:      &huma.Schema{Type: huma.TypeNumber, Minimum: new(0.0), Maximum: new(maxWait.Seconds()), Default: 30}}

// maxWait bounds a wait's timeout.
const maxWait = 600 * time.Second

// jsonNumber is the grammar of a JSON number (RFC 8259).
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// seconds returns the wait's timeout.
func (in *waitInput) seconds() (time.Duration, error) {
	f, err := strconv.ParseFloat(in.Timeout, 64)
	if !jsonNumber.MatchString(in.Timeout) || err != nil || f < 0 || f > maxWait.Seconds() {
		return 0, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{
			Location: "query.timeout", Message: "want a number of seconds from 0 to 600", Value: in.Timeout})
	}
	return time.Duration(f * float64(time.Second)), nil
}

type statusOutput struct{ Body Status }

type listOutput struct {
	Body struct {
		Scans []Status `json:"scans" nullable:"false"`
	}
}

type filesOutput struct {
	Body struct {
		Files []File `json:"files" nullable:"false"`
	}
}

// token is the security of every operation under /v1/: the service's
// token, when it has one (see guard).
var token = []map[string][]string{{"token": {}}}

// The statuses besides success that the operations give, for the OpenAPI
// document, besides the guard's (401, 403 and 415: see documentGuard): a
// request whose parameters or body break the schema gets 422 (huma adds
// it wherever there are any), a body that is not JSON 400 and one too
// large 413; a scan id the service does not keep 404; an arm or change
// that clashes with a scan 409; an arm whose checks do not end in time, or
// that comes while the service shuts down, 503.
var (
	scanErrors   = []int{http.StatusNotFound}
	changeErrors = []int{http.StatusNotFound, http.StatusConflict}
	armErrors    = []int{http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable}
)

// register adds every operation to the API.
func (s *Service) register() {
	s.registerArm()
	s.registerReads()
	s.registerChanges()
	s.registerEvents()
	s.registerStatus()
	s.registerLinks()
}

// registerArm registers arming a scan.
func (s *Service) registerArm() {
	huma.Register(s.api, huma.Operation{
		OperationID: "arm", Method: http.MethodPost, Path: "/v1/scans", DefaultStatus: http.StatusCreated,
		Summary: "Arm a scan",
		Description: "Runs the pre-scan checks and starts waiting for the detector. A scan already armed, running or being armed: 409. " +
			"Checks that do not end in time (a file system that does not answer): 503, and no scan is armed. " +
			"A client that goes away before the scan is armed arms nothing.",
		MaxBodyBytes: maxBody, Errors: armErrors,
	}, func(ctx context.Context, in *armInput) (*statusOutput, error) {
		st, err := s.arm(ctx, in.Body)
		if err != nil {
			return nil, err
		}
		return &statusOutput{st}, nil
	})
}

// registerReads registers what reads the scans: the list, one scan, the
// wait for one to end and its files.
func (s *Service) registerReads() {
	huma.Register(s.api, huma.Operation{
		OperationID: "list-scans", Method: http.MethodGet, Path: "/v1/scans",
		Summary: "The current scan and the last ended ones",
	}, func(ctx context.Context, in *struct{}) (*listOutput, error) {
		out := &listOutput{}
		out.Body.Scans = s.list()
		return out, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "get-scan", Method: http.MethodGet, Path: "/v1/scans/{id}",
		Summary: "A scan's state and counts", Errors: scanErrors,
	}, func(ctx context.Context, in *idInput) (*statusOutput, error) {
		j, err := s.find(in.ID)
		if err != nil {
			return nil, err
		}
		return &statusOutput{j.snapshot()}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "wait-scan", Method: http.MethodGet, Path: "/v1/scans/{id}/wait",
		Summary:     "Wait for a scan to end",
		Description: "Returns when the scan has ended or the timeout has passed, whichever is first: look at its state.",
		Errors:      scanErrors, Parameters: []*huma.Param{waitTimeout},
	}, func(ctx context.Context, in *waitInput) (*statusOutput, error) {
		timeout, err := in.seconds()
		if err != nil {
			return nil, err
		}
		st, err := s.wait(ctx, in.ID, timeout)
		if err != nil {
			return nil, err
		}
		return &statusOutput{st}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "scan-files", Method: http.MethodGet, Path: "/v1/scans/{id}/files",
		Summary: "The files a scan finalised", Errors: scanErrors,
	}, func(ctx context.Context, in *idInput) (*filesOutput, error) {
		j, err := s.find(in.ID)
		if err != nil {
			return nil, err
		}
		out := &filesOutput{}
		out.Body.Files = j.snapshot().Files
		return out, nil
	})
}

// registerChanges registers stopping and cancelling a scan.
func (s *Service) registerChanges() {
	for _, op := range []struct {
		id, path, summary, desc string
		cancel                  bool
	}{
		{"stop-scan", "/v1/scans/{id}/stop", "Stop a scan, draining it",
			"Takes no more frames, writes those in flight and records the rest missing.", false},
		{"cancel-scan", "/v1/scans/{id}/cancel", "Cancel a scan",
			"Takes no more frames and writes those that had arrived (the receiver's ring: a second or two of a module's frames, for at most 5 s), then closes the file; the rest are recorded missing. Frames that arrived but could not be written in that time are counted discarded, with a warning in serve's log. The scan ends cancelled, without an error unless its file failed.", true},
	} {
		huma.Register(s.api, huma.Operation{
			OperationID: op.id, Method: http.MethodPost, Path: op.path, DefaultStatus: http.StatusAccepted,
			Summary: op.summary, Description: op.desc, Errors: changeErrors,
		}, func(ctx context.Context, in *idInput) (*statusOutput, error) {
			st, err := s.stop(in.ID, op.cancel)
			if err != nil {
				return nil, err
			}
			return &statusOutput{st}, nil
		})
	}
}

// registerEvents registers the server-sent events of every scan.
func (s *Service) registerEvents() {
	huma.Register(s.api, huma.Operation{
		OperationID: "events", Method: http.MethodGet, Path: "/v1/events",
		Summary:     "Server-sent events of every scan",
		Description: "armed, first_frame, progress (a few a second at most), file_finalised, done and failed, each with an id unique across restarts of the service. The head comes at once, and a comment every 15 s while no event does. A client that falls behind is disconnected and reconnects; with Last-Event-ID it gets the events it missed, of the last 256.",
		Responses:   s.eventsResponse(),
	}, func(ctx context.Context, in *eventsInput) (*huma.StreamResponse, error) {
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			_, w := humago.Unwrap(hc)
			s.events.follow(hc.Context(), in.LastEventID, w)
		}}, nil
	})
}

// boundLevels makes the API's bounds of output.level those the codecs
// take, as the registry says (levels), and its description list each
// codec's: a level a codec's entry allows is never refused by the schema
// first. The codec the profile names still judges the level (a 422
// naming its range).
func (s *Service) boundLevels(levels []CodecLevels) {
	if len(levels) == 0 {
		return
	}
	schema := s.api.OpenAPI().Components.Schemas.Map()["OutputOverrides"]
	if schema == nil || schema.Properties["level"] == nil {
		return
	}
	p := schema.Properties["level"]
	lo, hi := 0.0, 0.0
	var each []string
	for _, l := range levels {
		lo, hi = min(lo, float64(l.Min)), max(hi, float64(l.Max))
		each = append(each, fmt.Sprintf("%s %d to %d", l.Codec, l.Min, l.Max))
	}
	p.Minimum, p.Maximum = &lo, &hi
	p.Description = "Compression level: " + strings.Join(each, ", ") + "; 0: the codec's default. The profile's codec (output.compression) judges it."
	p.PrecomputeMessages()
}
