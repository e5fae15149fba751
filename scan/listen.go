package scan

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"

	"h5ingest/config"
	"h5ingest/receive"
)

// ModuleAddr returns the address the receiver of module id listens on
// where each module has a listener of its own (ListenEach, a serve): the
// profile's source.address and source.port, the port plus the module's
// index in detector.modules where the profile lists several, so that the
// serves of one host, each with modules of its own, never share a port.
func ModuleAddr(profile config.Profile, id int) (string, error) {
	src := profile.Source
	i := slices.IndexFunc(profile.Detector.Modules, func(m config.Module) bool { return m.ID == id })
	if i < 0 {
		return "", fmt.Errorf("module %d is not one of the profile's detector.modules", id)
	}
	port := src.Port + i
	if port > 65535 {
		return "", fmt.Errorf("module %d listens on source.port %d plus its index %d, past port 65535: lower source.port", id, src.Port, i)
	}
	return net.JoinHostPort(src.Address, strconv.Itoa(port)), nil
}

// ListenEach opens, ahead of Run, a listener of its own for every module
// of the scan's files, each on the module's port (ModuleAddr) and
// refusing any other module's sender: a serve of several modules listens
// so from the arming. A port that cannot be listened on is an error
// naming its module, with every listener opened closed. Close closes
// them where Run never ran.
func (a *Acquisition) ListenEach() error {
	var ls []receive.Listener
	closeAll := func() {
		for _, l := range ls {
			l.Close()
		}
	}
	late := make([]*lateHello, len(a.o.Files.Modules))
	for i, f := range a.o.Files.Modules {
		late[i] = &lateHello{}
		setup, err := a.moduleSetup(f.Module.ID, late[i])
		if err == nil {
			var l receive.Listener
			if l, err = a.listen(setup); err == nil {
				ls = append(ls, l)
			}
		}
		if err != nil {
			closeAll()
			return fmt.Errorf("module %d: %w", f.Module.ID, err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.each {
		l.Close()
	}
	a.each, a.late, a.eachMode = ls, late, true
	return nil
}

// lateHello tells whether a module's sender said hello after its
// listener was stopped, and so was refused: the hello check sees it before
// the sender is told, where the listener's Accept may learn of it only
// after the scan has ended.
type lateHello struct {
	stopped atomic.Bool // the listener refuses every hello from now on
	seen    atomic.Bool // a hello of the module came since, and passed the checks
}

// moduleSetup returns the receiver setup of module id alone: on its own
// port, refusing any other module's sender. A hello that passes its checks
// after late.stopped is noted in late.
func (a *Acquisition) moduleSetup(id int, late *lateHello) (receive.Setup, error) {
	addr, err := ModuleAddr(a.o.Profile, id)
	if err != nil {
		return receive.Setup{}, err
	}
	setup := a.setup
	setup.Addr, setup.Modules = addr, []int{id}
	check := a.setup.Check
	setup.Check = func(h receive.Module) error {
		if int(h.ID) != id {
			return fmt.Errorf("module %d sent to the port of module %d (%s): module K sends to source.port plus K's index in the profile's detector.modules", h.ID, id, addr)
		}
		if err := check(h); err != nil {
			return err
		}
		if late.stopped.Load() {
			late.seen.Store(true)
		}
		return nil
	}
	return setup, nil
}
