package roce

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"h5ingest/receive"
)

// Station is the receiver's queue pairs and rings set up once, when the
// scan service starts, as a Pi-mega backend's init arguments are
// exchanged once: each scan takes a Listener of it (Scan), over rings
// emptied for the scan, as resetRDMABuffer empties the backend's. Its
// parameters (GET /v1/rdma) carry a nonce new at each scan, so that a
// front end's file answering an earlier scan is not taken for this one's.
type Station struct {
	st *station
}

// OpenStation sets up the queue pairs of setup's modules for every scan
// the service will run: the front end's ends come from the profile, from
// a control system (SetPeers) or from the front end's file.
func OpenStation(s receive.Setup) (receive.Station, error) {
	s.ProfileOnly = true // no file is needed: GET /v1/rdma serves the parameters
	cfg, err := ConfigOf(s)
	if err != nil {
		return nil, err
	}
	st, err := newStation(cfg, true)
	if err != nil {
		return nil, err
	}
	return &Station{st: st}, nil
}

// Scan returns the listener of one scan of setup's modules, their rings
// emptied and a new nonce in the parameters. A setup whose profile asks
// for other queue pairs or rings than the station's is refused, naming
// the key, and so is a module already in a scan.
func (t *Station) Scan(setup receive.Setup) (receive.Listener, error) {
	setup.ProfileOnly = true
	cfg, err := ConfigOf(setup)
	if err != nil {
		return nil, err
	}
	if err := t.st.cfg.sameLinks(cfg); err != nil {
		return nil, err
	}
	st := t.st
	streams, err := st.beginScan(cfg.Modules, uint64(max(setup.Frames, 0)))
	if err != nil {
		return nil, err
	}
	if err := st.writeParams(); err != nil {
		for _, s := range streams {
			s.endScan()
		}
		return nil, err
	}
	return st.listener(streams, setup.Check, false), nil
}

// beginScan takes the streams of modules for a scan of frames frames,
// their rings emptied; the first modules a scan takes give the
// parameters a new nonce, every module not ready.
func (st *station) beginScan(modules []int, frames uint64) ([]*Stream, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, errors.New("the queue pairs are closed: the service is stopping")
	}
	var streams []*Stream
	for _, m := range modules {
		i := slices.Index(st.cfg.Modules, m)
		if i < 0 {
			return nil, fmt.Errorf("module %d: serve set up no queue pair for it (it has modules %v: restart serve with the module)", m, st.cfg.Modules)
		}
		s := st.streams[i]
		if s.inScan() {
			return nil, fmt.Errorf("module %d: its queue pair is in a scan still", m)
		}
		streams = append(streams, s)
	}
	busy := false
	for _, s := range st.streams {
		busy = busy || s.inScan()
	}
	if !busy {
		st.nonce = newNonce()
		st.params.Nonce, st.params.Ready = st.nonce, false
		for i := range st.params.Modules {
			st.params.Modules[i].Ready = false
		}
	}
	for _, s := range streams {
		if st.frontEnds == nil {
			// The front end's ends come from its file, answering this
			// scan's nonce: until they do, the queue pair takes nothing,
			// so that a front end of an earlier scan still writing (one
			// never waits) lands nothing in this scan's ring.
			if err := s.unlink(); err != nil {
				return nil, err
			}
		}
		s.beginScan(frames)
	}
	return streams, nil
}

// View is what GET /v1/rdma shows: the receiver's end of every queue
// pair, as the parameter file has it, and the front end's ends where they
// are given for every scan, with whence.
type View struct {
	Params
	FrontEnd     []FrontEndPort `json:"front_end,omitempty"`      // the front end's ends given, by module
	FrontEndFrom string         `json:"front_end_from,omitempty"` // givenByProfile or givenByRequest; absent: the front end's file, each scan
}

// Params returns the station's View (GET /v1/rdma).
func (t *Station) Params() any {
	v := View{Params: t.st.paramsNow()}
	st := t.st
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, m := range st.cfg.Modules {
		if fe, ok := st.frontEnds[m]; ok {
			v.FrontEnd = append(v.FrontEnd, fe)
		}
	}
	v.FrontEndFrom = st.givenBy()
	return v
}

// ClearPeers forgets the front end's ends a control system gave
// (SetPeers): from the next scan they come from the front end's file
// again. A profile that gives the ends refuses, wrapping
// receive.ErrPeersFixed.
func (t *Station) ClearPeers() error {
	st := t.st
	if err := st.peersFixed(); err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.frontEnds = nil
	return nil
}

// SetPeers takes the front end's ends of the queue pairs, a FrontEndParams
// as JSON (its nonce may be empty: a front end whose ends its firmware
// fixes answers no scan in particular). The queue pairs are brought up
// toward them at the next scan's Accept. A profile that gives the ends
// (source.front_end) refuses them, wrapping receive.ErrPeersFixed.
func (t *Station) SetPeers(data []byte) error {
	st := t.st
	if err := st.peersFixed(); err != nil {
		return err
	}
	var fe FrontEndParams
	if err := strictJSON(data, &fe); err != nil {
		return fmt.Errorf("the front end's ends: %w", err)
	}
	if fe.Version != 0 && fe.Version != ParamsVersion {
		return fmt.Errorf("the front end's ends: version %d, want %d", fe.Version, ParamsVersion)
	}
	ends := map[int]FrontEndPort{}
	for _, p := range fe.Modules {
		if !slices.Contains(st.cfg.Modules, p.Module) {
			return fmt.Errorf("the front end's ends: module %d: serve set up no queue pair for it (modules %v)", p.Module, st.cfg.Modules)
		}
		if _, dup := ends[p.Module]; dup {
			return fmt.Errorf("the front end's ends: module %d given twice", p.Module)
		}
		if _, err := p.peer(); err != nil {
			return fmt.Errorf("the front end's ends: %w", err)
		}
		ends[p.Module] = p
	}
	for _, m := range st.cfg.Modules {
		if _, ok := ends[m]; !ok {
			return fmt.Errorf("the front end's ends: no entry for module %d", m)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.frontEnds = ends
	return nil
}

// Close closes every queue pair and the device.
func (t *Station) Close() error { return t.st.close() }

// sameLinks refuses a scan's configuration that asks for other queue
// pairs or rings than c's, naming the first key that differs.
func (c *Config) sameLinks(o Config) error {
	diff := func(key string, have, want any) error {
		return fmt.Errorf("key source.%s: the scan's profile asks for %v, serve set up its queue pairs with %v at start-up (restart serve with the profile, or arm one that agrees)", key, want, have)
	}
	switch {
	case o.Device != c.Device:
		return diff("device", c.Device, o.Device)
	case o.Port != c.Port:
		return diff("device_port", c.Port, o.Port)
	case o.GIDIndex != c.GIDIndex:
		return diff("gid_index", c.GIDIndex, o.GIDIndex)
	case o.QPType != c.QPType:
		return diff("qp_type", qpTypeName(c.QPType), qpTypeName(o.QPType))
	case o.MTU != c.MTU:
		return diff("mtu", c.MTU, o.MTU)
	case o.Slots != c.Slots:
		return diff("ring_slots", c.Slots, o.Slots)
	case o.SlotSize() != c.SlotSize():
		return fmt.Errorf("the scan's frames take %d bytes a slot, serve's ring has slots of %d (its detector's format at start-up)", o.SlotSize(), c.SlotSize())
	case o.Format != c.Format:
		// The stream hands out frames of the station's format, which the
		// scan's check would refuse only once the front end is linked.
		return fmt.Errorf("keys detector.*: the scan's profile has frames of %v, serve set up its queue pairs for %v at start-up (restart serve with the profile, or arm one that agrees)", o.Format, c.Format)
	case o.WriteGuard != c.WriteGuard:
		return diff("write_guard", c.WriteGuard, o.WriteGuard)
	case o.Immediate != c.Immediate:
		return diff("immediate", c.Immediate, o.Immediate)
	case o.Header != c.Header:
		return diff("frame_header", c.Header, o.Header)
	}
	return nil
}

// strictJSON decodes data into v, refusing unknown fields and trailing
// data.
func strictJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}
