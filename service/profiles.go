package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// ProfileInfo is one profile an arm request may name.
type ProfileInfo struct {
	Name        string `json:"name" doc:"What an arm request's profile names: a built-in profile's name, or a file's in the service's profiles directory without .yaml."`
	Description string `json:"description,omitempty"`
	Source      string `json:"source" enum:"built-in,file" doc:"built-in: compiled into h5ingest (h5ingest profiles list); file: in the service's profiles directory (serve --profiles)."`
	Modules     []int  `json:"modules" nullable:"false" doc:"The detector modules of the profile."`
	Error       string `json:"error,omitempty" doc:"Why the profile does not load: an arm naming it is refused."`
}

// ProfileKey is one key of a merged profile, as h5ingest profiles show
// prints it.
type ProfileKey struct {
	Key   string   `json:"key" doc:"The key, dotted, e.g. output.compression."`
	Value string   `json:"value" doc:"Its merged value as text: strings quoted, lists in brackets, durations as 10s."`
	From  string   `json:"from" doc:"Where the value came from: default, profile NAME, environment H5INGEST_..., or the service's own setting."`
	OneOf []string `json:"one_of,omitempty" doc:"For a key that names a stage: the names it may take."`
}

// ProfileDetail is a profile merged over the defaults and the
// environment, as an arm with no overrides would load it.
type ProfileDetail struct {
	Name        string       `json:"name"`
	Description string       `json:"description,omitempty"`
	Source      string       `json:"source" enum:"built-in,file"`
	Keys        []ProfileKey `json:"keys" nullable:"false" doc:"Every key, in the order of docs/profiles.md."`
}

// ErrNoProfile is what a ProfileLister returns for a name that is neither
// built in nor in its profiles directory.
var ErrNoProfile = errors.New("no such profile")

// ProfileLister is a Runner that lists the profiles an arm may name and
// shows one merged (optional).
type ProfileLister interface {
	// ListProfiles returns the profiles, built-in ones first; a profile
	// that does not load is listed with its error.
	ListProfiles() ([]ProfileInfo, error)
	// ShowProfile returns the profile name merged as an arm would load it
	// without overrides: an error wrapping ErrNoProfile when there is no
	// such profile, another when it does not load.
	ShowProfile(name string) (ProfileDetail, error)
}

type profilesOutput struct {
	Body struct {
		Profiles []ProfileInfo `json:"profiles" nullable:"false"`
	}
}

type profileInput struct {
	Name string `path:"name" maxLength:"255" pattern:"^[A-Za-z0-9_-][A-Za-z0-9._-]*$" doc:"The profile's name, as an arm names it."`
}

type profileOutput struct{ Body ProfileDetail }

// registerProfiles registers the list of profiles and the view of one.
func (s *Service) registerProfiles() {
	huma.Register(s.api, huma.Operation{
		OperationID: "list-profiles", Method: http.MethodGet, Path: "/v1/profiles",
		Summary:     "The profiles an arm may name",
		Description: "The built-in profiles and the files of the service's profiles directory, named as an arm names them (without .yaml).",
		Errors:      []int{http.StatusInternalServerError},
	}, func(ctx context.Context, in *struct{}) (*profilesOutput, error) {
		out := &profilesOutput{}
		out.Body.Profiles = []ProfileInfo{}
		l, ok := s.runner.(ProfileLister)
		if !ok {
			return out, nil
		}
		list, err := l.ListProfiles()
		if err != nil {
			return nil, huma.Error500InternalServerError("list the profiles", err)
		}
		out.Body.Profiles = append(out.Body.Profiles, list...)
		return out, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "get-profile", Method: http.MethodGet, Path: "/v1/profiles/{name}",
		Summary:     "A profile merged over the defaults and the environment, with where each value came from",
		Description: "As h5ingest profiles show prints it, and as an arm with no overrides loads it. A profile that does not load: 422 with the reason.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, func(ctx context.Context, in *profileInput) (*profileOutput, error) {
		l, ok := s.runner.(ProfileLister)
		if !ok {
			return nil, huma.Error404NotFound(fmt.Sprintf("profile %s: this service lists no profiles", in.Name))
		}
		d, err := l.ShowProfile(in.Name)
		switch {
		case errors.Is(err, ErrNoProfile):
			return nil, huma.Error404NotFound(err.Error())
		case err != nil:
			return nil, huma.Error422UnprocessableEntity(err.Error())
		}
		return &profileOutput{d}, nil
	})
}
