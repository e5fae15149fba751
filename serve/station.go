package serve

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/receive"
	"h5ingest/scan"
	"h5ingest/service"
)

// StationOptions is how serve sets up, at start-up, the links of a source
// whose links are static (source.transport roce): once, for every scan.
type StationOptions struct {
	// Profile names the profile (built in, or of the Runner's profiles
	// directory) whose source and detector keys the links are made of.
	Profile string
	// ParamsFile, where set, is where the receiver's ends are written
	// for the front end (besides GET /v1/rdma); PeerFile where the front
	// end's are read, where neither the profile nor a control system
	// gives them.
	ParamsFile, PeerFile string
}

// OpenStation sets up the links of o.Profile's source for every scan the
// runner will prepare: the modules this serve receives (ModuleIDs, else
// the profile's). Scans of that source then listen through them alone.
// The runner's Station is set; Close it when serve ends.
func (r *Runner) OpenStation(o StationOptions) error {
	if r.Stages == nil {
		return errNoRegistry
	}
	p, _, err := r.load(service.ArmRequest{Profile: o.Profile})
	if err != nil {
		return scan.Usage(err)
	}
	entry, err := scan.SourceOf(r.Stages, p)
	if err != nil {
		return err
	}
	if entry.Station == nil {
		return scan.Usage(fmt.Errorf("profile %s: source.transport %s sets up no links ahead of the scans: nothing to set up at start-up", o.Profile, entry.Name))
	}
	format, err := p.Detector.Format()
	if err != nil {
		return scan.Usage(err)
	}
	modules := r.ModuleIDs
	if len(modules) == 0 {
		modules = p.Detector.ModuleIDs()
	}
	for _, m := range modules {
		if !slices.Contains(p.Detector.ModuleIDs(), m) {
			return scan.Usage(fmt.Errorf("profile %s has no module %d (detector.modules)", o.Profile, m))
		}
	}
	st, err := entry.Station(receive.Setup{Source: p.Source, Format: format, Modules: modules,
		ParamsFile: o.ParamsFile, PeerFile: o.PeerFile, Log: r.log()})
	if err != nil {
		return fmt.Errorf("set up the %s links of profile %s: %w", entry.Name, o.Profile, err)
	}
	r.Station, r.stationSource = st, entry.Name
	r.log().Info("links set up for every scan", zap.String("profile", o.Profile), zap.String("transport", entry.Name), zap.Ints("modules", modules))
	return nil
}

// log returns the runner's logger, or one that logs nothing.
func (r *Runner) log() *zap.Logger {
	if r.Log == nil {
		return zap.NewNop()
	}
	return r.Log
}

// errNoStation refuses a scan of a source that serve must set up at
// start-up, where it did not.
var errNoStation = errors.New("serve sets this source's links up once, at start-up: start serve with --rdma-profile NAME, a profile of source.transport roce")

// stationOpen returns how a scan of profile p opens its listener where
// the source's links are the runner's Station: nil for a source that
// opens its own, each scan.
func (r *Runner) stationOpen(p config.Profile) (func(receive.Setup) (receive.Listener, error), error) {
	entry, err := scan.SourceOf(r.Stages, p)
	if err != nil || entry.Station == nil {
		return nil, err
	}
	if r.Station == nil || r.stationSource != entry.Name {
		return nil, fmt.Errorf("key source.transport %s: %w", entry.Name, errNoStation)
	}
	return r.Station.Scan, nil
}

// Links returns the runner's Station as the service's GET and PUT
// /v1/rdma show it; nil where serve set up none.
func (r *Runner) Links() service.Links {
	if r.Station == nil {
		return nil
	}
	return stationLinks{r.Station}
}

// stationLinks is a Station as the service sees it.
type stationLinks struct{ receive.Station }

func (l stationLinks) SetPeers(data []byte) error { return peersErr(l.Station.SetPeers(data)) }

func (l stationLinks) ClearPeers() error { return peersErr(l.Station.ClearPeers()) }

// peersErr makes the station's refusal of a change to the front end's
// ends the service's, which it answers 403.
func peersErr(err error) error {
	if errors.Is(err, receive.ErrPeersFixed) {
		return fmt.Errorf("%w: %w", service.ErrPeersFixed, err)
	}
	return err
}
