package service

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// Links are a receiver's links to the detector set up once, when serve
// starts, as a Pi-mega front end's static RoCE queue pairs are (serve
// --rdma-profile): GET /v1/rdma shows the receiver's end of them, PUT
// /v1/rdma takes the front end's.
type Links interface {
	// Params returns the receiver's end of every link, for JSON: the
	// parameter file's schema of docs/protocol.md.
	Params() any
	// SetPeers takes the front end's ends, JSON; an error wrapping
	// ErrPeersFixed where the profile gives them.
	SetPeers(data []byte) error
	// ClearPeers forgets the front end's ends SetPeers took; an error
	// wrapping ErrPeersFixed where the profile gives them.
	ClearPeers() error
}

// ErrPeersFixed is wrapped by Links.SetPeers's error where the operator's
// profile gives the front end's ends: a request may not replace them.
var ErrPeersFixed = errors.New("the front end's ends are the profile's")

type linksOutput struct {
	Body any
}

// frontEnds is the front end's ends of the queue pairs, as its file
// has them (docs/protocol.md).
type frontEnds struct {
	Version int           `json:"version,omitempty" minimum:"0" doc:"the parameter file's version; 0 or absent: the current one"`
	Nonce   string        `json:"nonce,omitempty" maxLength:"64" doc:"the receiver's nonce the ends answer; absent for ends a firmware fixes"`
	Modules []frontEndEnd `json:"modules" minItems:"1" maxItems:"256"`
}

type frontEndEnd struct {
	Module int    `json:"module" minimum:"0" maximum:"65535" doc:"the module's id"`
	GID    string `json:"gid" minLength:"2" maxLength:"64" doc:"the front end's GID, an IPv6 address (pimega.h fe_gid)"`
	QPN    uint32 `json:"qpn" minimum:"1" maximum:"16777215" doc:"its queue pair number"`
	PSN    uint32 `json:"psn" maximum:"16777215" doc:"the first packet sequence number it sends"`
	MAC    string `json:"mac,omitempty" maxLength:"32" doc:"its MAC address (pimega.h fe_mac), for people: the kernel finds it from the GID"`
}

type peersInput struct {
	Body frontEnds
}

// registerLinks registers GET and PUT /v1/rdma, where serve set up links.
func (s *Service) registerLinks() {
	huma.Register(s.api, huma.Operation{
		OperationID: "get-rdma", Method: http.MethodGet, Path: "/v1/rdma",
		Summary: "The receiver's end of each module's queue pair",
		Description: "What a detector front end needs to write into the receiver's rings (docs/protocol.md, the parameter file): per module the GID, QPN, PSN, ring address, rkey, slot size and count, and the scan's nonce, with ready true once the scan takes frames. " +
			"404 where serve set up no queue pairs (serve --rdma-profile).",
		Errors: []int{http.StatusNotFound},
	}, func(ctx context.Context, in *struct{}) (*linksOutput, error) {
		if s.cfg.Links == nil {
			return nil, errNoLinks()
		}
		return &linksOutput{Body: s.cfg.Links.Params()}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "put-rdma", Method: http.MethodPut, Path: "/v1/rdma", DefaultStatus: http.StatusNoContent,
		Summary: "Give the front end's end of each module's queue pair",
		Description: "The front end's ends, as its own file has them (docs/protocol.md): {\"modules\": [{\"module\", \"gid\", \"qpn\", \"psn\", \"mac\"}]}. The queue pairs are brought up toward them at the next scan. " +
			"Only with the service's token (403 where it has none), and only where the profile gives no source.front_end (403). A body that is not such ends: 422.",
		MaxBodyBytes: maxBody,
		Errors:       []int{http.StatusForbidden, http.StatusNotFound, http.StatusUnprocessableEntity},
	}, func(ctx context.Context, in *peersInput) (*struct{}, error) {
		if err := s.changingLinks(); err != nil {
			return nil, err
		}
		data, err := json.Marshal(in.Body)
		if err != nil {
			return nil, err
		}
		return nil, peersRefused(s.cfg.Links.SetPeers(data), huma.Error422UnprocessableEntity)
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "delete-rdma", Method: http.MethodDelete, Path: "/v1/rdma", DefaultStatus: http.StatusNoContent,
		Summary:     "Forget the front end's ends a PUT gave",
		Description: "From the next scan, the queue pairs meet the front end through its file again (serve --front-end). Only with the service's token (403 where it has none), and not where the profile gives source.front_end (403).",
		Errors:      []int{http.StatusForbidden, http.StatusNotFound},
	}, func(ctx context.Context, in *struct{}) (*struct{}, error) {
		if err := s.changingLinks(); err != nil {
			return nil, err
		}
		return nil, peersRefused(s.cfg.Links.ClearPeers(), nil)
	})
}

// errNoLinks answers /v1/rdma where serve set up no queue pairs.
func errNoLinks() error {
	return huma.Error404NotFound("serve set up no queue pairs: start it with --rdma-profile NAME")
}

// changingLinks refuses a change to the front end's ends where serve set
// up no queue pairs (404) or has no token (403): only the token's holder
// changes them.
func (s *Service) changingLinks() error {
	switch {
	case s.cfg.Links == nil:
		return errNoLinks()
	case s.cfg.Token == "":
		return huma.Error403Forbidden("the front end's ends are changed only with the service's token: start serve with --token-file")
	}
	return nil
}

// peersRefused answers the links' refusal of a change to the front end's
// ends: 403 where the profile gives them, else as other says (nil: err
// as it is).
func peersRefused(err error, other func(string, ...error) huma.StatusError) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrPeersFixed):
		return huma.Error403Forbidden(err.Error())
	case other != nil:
		return other(err.Error())
	}
	return err
}
