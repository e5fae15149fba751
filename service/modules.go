package service

// ModuleCounts are the counts of one module of a scan that receives
// several; the scan's counts are their sum.
type ModuleCounts struct {
	Module int    `json:"module" doc:"The detector module."`
	Counts Counts `json:"counts"`
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
