package service

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/sse"
)

// ArmRequest is what a control system sends to arm a scan. A scan id and
// an output file name are each one path element of letters, digits, '.',
// '_' and '-', not starting with a dot, so that no name from a request
// leaves the output directory.
type ArmRequest struct {
	Profile string `json:"profile" minLength:"1" maxLength:"4096" doc:"A built-in profile's name (h5ingest profiles list) or a profile file on the server."`
	// Overrides are profile keys over the profile, like flags on the
	// command line.
	Overrides map[string]any `json:"overrides,omitempty" doc:"Profile keys set over the profile, as the command line's flags set them, e.g. {\"output.compression\": \"bslz4\"}. An unknown key is refused."`
	Plan      *Plan          `json:"plan,omitempty" doc:"The scan plan; without one, the profile's."`
	ScanID    string         `json:"scan_id" minLength:"1" maxLength:"128" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$" patternDescription:"one path element: letters, digits, '.', '_', '-'" doc:"The scan's id: names its files through the profile's output template, and its stream's series."`
	Output    string         `json:"output,omitempty" maxLength:"200" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$" patternDescription:"one path element: letters, digits, '.', '_', '-'" doc:"File name in the profile's output directory, instead of its template."`
	// Metadata lands in the file.
	Title        string         `json:"title,omitempty" maxLength:"1024" doc:"NeXus /entry/title."`
	Sample       string         `json:"sample,omitempty" maxLength:"1024" doc:"NeXus /entry/sample/name."`
	ExperimentID string         `json:"experiment_identifier,omitempty" maxLength:"256" doc:"NeXus /entry/experiment_identifier (proposal or experiment number)."`
	UserMetadata map[string]any `json:"user_metadata,omitempty" doc:"Any JSON object: kept in the file under an NXcollection."`
}

// Plan is a scan plan: counts of darks, flats and projections in that
// order, or a sequence.
type Plan struct {
	Darks       int     `json:"darks,omitempty" minimum:"0" maximum:"10000000"`
	Flats       int     `json:"flats,omitempty" minimum:"0" maximum:"10000000"`
	Projections int     `json:"projections,omitempty" minimum:"0" maximum:"10000000"`
	Sequence    string  `json:"sequence,omitempty" maxLength:"4096" doc:"Frames in order as kind:count, e.g. flats:20,darks:10,projections:1800,flats:20; replaces the counts."`
	AngleStart  float64 `json:"angle_start,omitempty" doc:"Rotation angle of the first projection, degrees."`
	AngleEnd    float64 `json:"angle_end,omitempty" doc:"Rotation angle the projections stop short of, degrees."`
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
	Rejected    int `json:"rejected"`
	Dropped     int `json:"dropped" doc:"Duplicates, frames out of range, frames dropped because the pipeline was full."`
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
}

// Status is a scan's state and counts.
type Status struct {
	ScanID    string    `json:"scan_id"`
	State     State     `json:"state" enum:"armed,running,stopping,done,incomplete,cancelled,failed"`
	Counts    Counts    `json:"counts"`
	Rates     Rates     `json:"rates" doc:"How fast the scan goes: over about the last second while it runs, over the whole scan once it has ended."`
	Files     []File    `json:"files" nullable:"false"`
	Error     string    `json:"error,omitempty"`
	ArmedAt   time.Time `json:"armed_at"`
	StartedAt time.Time `json:"started_at,omitzero" doc:"When the first frame arrived."`
	EndedAt   time.Time `json:"ended_at,omitzero"`
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
	Auth string `header:"Authorization" doc:"Bearer TOKEN, when the service has a token."`
	Body ArmRequest
}

type idInput struct {
	ID string `path:"id" maxLength:"128" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"`
}

type changeInput struct {
	Auth string `header:"Authorization" doc:"Bearer TOKEN, when the service has a token."`
	ID   string `path:"id" maxLength:"128" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"`
}

type waitInput struct {
	ID      string  `path:"id" maxLength:"128" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"`
	Timeout float64 `query:"timeout" default:"30" minimum:"0" maximum:"600" doc:"Seconds to wait for the scan to end."`
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

// register adds every operation to the API.
func (s *Service) register() {
	token := []map[string][]string{{"token": {}}}
	s.registerArm(token)
	s.registerReads()
	s.registerChanges(token)
	s.registerEvents()
	s.registerStatus()
}

// registerArm registers arming a scan, which needs the token.
func (s *Service) registerArm(token []map[string][]string) {
	huma.Register(s.api, huma.Operation{
		OperationID: "arm", Method: http.MethodPost, Path: "/v1/scans", DefaultStatus: http.StatusCreated,
		Summary:     "Arm a scan",
		Description: "Runs the pre-scan checks and starts waiting for the detector. A scan already armed or running: 409.",
		Security:    token, MaxBodyBytes: maxBody,
		Errors: []int{http.StatusUnauthorized, http.StatusConflict, http.StatusUnprocessableEntity},
	}, func(ctx context.Context, in *armInput) (*statusOutput, error) {
		if err := s.authorize(in.Auth); err != nil {
			return nil, err
		}
		st, err := s.arm(in.Body)
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
		Summary: "A scan's state and counts", Errors: []int{http.StatusNotFound},
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
		Errors:      []int{http.StatusNotFound},
	}, func(ctx context.Context, in *waitInput) (*statusOutput, error) {
		st, err := s.wait(ctx, in.ID, time.Duration(in.Timeout*float64(time.Second)))
		if err != nil {
			return nil, err
		}
		return &statusOutput{st}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "scan-files", Method: http.MethodGet, Path: "/v1/scans/{id}/files",
		Summary: "The files a scan finalised", Errors: []int{http.StatusNotFound},
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

// registerChanges registers stopping and cancelling a scan, which need
// the token.
func (s *Service) registerChanges(token []map[string][]string) {
	for _, op := range []struct {
		id, path, summary, desc string
		cancel                  bool
	}{
		{"stop-scan", "/v1/scans/{id}/stop", "Stop a scan, draining it",
			"Takes no more frames, writes those in flight and records the rest missing.", false},
		{"cancel-scan", "/v1/scans/{id}/cancel", "Cancel a scan",
			"Closes the file at once with the frames that arrived; the rest are recorded missing.", true},
	} {
		huma.Register(s.api, huma.Operation{
			OperationID: op.id, Method: http.MethodPost, Path: op.path, DefaultStatus: http.StatusAccepted,
			Summary: op.summary, Description: op.desc, Security: token, MaxBodyBytes: maxBody,
			Errors: []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusConflict},
		}, func(ctx context.Context, in *changeInput) (*statusOutput, error) {
			if err := s.authorize(in.Auth); err != nil {
				return nil, err
			}
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
	sse.Register(s.api, huma.Operation{
		OperationID: "events", Method: http.MethodGet, Path: "/v1/events",
		Summary:     "Server-sent events of every scan",
		Description: "armed, first_frame, progress (a few a second at most), file_finalised, done and failed, each with an id. A client that falls behind is disconnected and reconnects; with Last-Event-ID it gets the events it missed, of the last 256.",
	}, eventTypes, func(ctx context.Context, in *eventsInput, send sse.Sender) {
		s.events.follow(ctx, in, send)
	})
}
