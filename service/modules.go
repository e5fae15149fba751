package service

// ModuleCounts are the counts of one module of a scan; the scan's counts
// are the sum of its modules'.
type ModuleCounts struct {
	Module int    `json:"module" doc:"The detector module."`
	Counts Counts `json:"counts"`
	// Link is what the module's link received, where its front end never
	// waits for the receiver (source.transport roce).
	Link *LinkCounts `json:"link,omitempty" doc:"What the module's link received, where its front end writes without waiting for the receiver (source.transport roce)."`
}

// LinkCounts are what a module's link received from a front end that
// never waits for the receiver: frames it wrote over before they were
// read, numbers it skipped, and how full the ring is.
type LinkCounts struct {
	Received   int     `json:"received" doc:"Writes whose completion came."`
	Overrun    int     `json:"overrun" doc:"Frames the front end wrote over before they were read whole: recorded missing."`
	Gaps       int     `json:"gaps" doc:"Frame numbers the front end skipped."`
	Damaged    int     `json:"damaged" doc:"Writes whose slot held no whole frame, or that named a slot beyond the ring: not taken."`
	Disordered int     `json:"disordered" doc:"Frame numbers that repeated or went back."`
	RingFill   float64 `json:"ring_fill" minimum:"0" maximum:"1" doc:"Fraction of the ring's slots holding frames not yet read."`
	RingSlots  int     `json:"ring_slots" doc:"Slots in the ring."`
}

// ModuleReporter is a Reporter that also takes the counts of each module
// of a scan of several. The service's Reporter is one: a Scan of several
// modules finds it by type assertion and reports them before each
// Progress, and once more at its end.
type ModuleReporter interface {
	// ModuleProgress reports each module's counts, from the goroutine
	// that calls Progress. The service keeps the slice: the caller does
	// not change it afterwards.
	ModuleProgress([]ModuleCounts)
}

// ModuleProgress implements ModuleReporter.
func (r *reporter) ModuleProgress(m []ModuleCounts) {
	r.j.mu.Lock()
	r.j.status.Modules = m
	r.j.mu.Unlock()
}
