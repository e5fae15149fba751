package scan

import (
	"fmt"
	"time"

	"h5ingest/config"
	"h5ingest/plan"
	"h5ingest/source/capture"
	"h5ingest/source/sim"
	"h5ingest/version"
)

// captureMetadata returns the metadata of a capture that command (acquire,
// simulate) writes: the profile's name, the time, the program and its
// version, and, so that a replay writes the file the scan would have
// written, the plan (where the scan has one), the merged profile and the
// detector's geometry.
func captureMetadata(command, profileName string, profile config.Profile, pl plan.Plan, now time.Time) (capture.Metadata, error) {
	m := capture.Metadata{
		Profile:  profileName,
		Created:  now.UTC().Format(time.RFC3339),
		Software: fmt.Sprintf("h5ingest %s %s", command, version.String()),
	}
	d := profile.Detector
	g := capture.Geometry{Orientation: d.ChipOrientation, PixelSize: d.PixelSize, Distance: d.Distance, Energy: d.Energy}
	if format, err := d.Format(); err == nil {
		g.Format = capture.NewFormatInfo(format)
	}
	for _, mod := range d.Modules {
		g.Modules = append(g.Modules, capture.Module{ID: mod.ID, X: mod.X, Y: mod.Y})
	}
	err := m.SetFields(capture.KeyVersion, version.String(), capture.KeyProfileValues, profile.Values(), capture.KeyGeometry, g)
	if err == nil && pl.Frames() > 0 {
		err = m.Set(capture.KeyPlan, pl)
	}
	return m, err
}

// CapturePlan returns the scan plan a capture records: its plan field, or
// in a simulated capture written before there was one, the plan of its
// ground truth. It reports false where the capture has none.
func CapturePlan(m capture.Metadata) (plan.Plan, bool, error) {
	var p plan.Plan
	ok, err := m.Get(capture.KeyPlan, &p)
	if err != nil {
		return plan.Plan{}, false, err
	}
	if !ok {
		var truth struct {
			Plan *plan.Plan `json:"plan"`
		}
		if found, err := m.Get(sim.TruthKey, &truth); err != nil || !found || truth.Plan == nil {
			return plan.Plan{}, false, nil // a truth that does not parse is no plan
		}
		p = *truth.Plan
	}
	if err := p.Validate(); err != nil {
		return plan.Plan{}, false, fmt.Errorf("metadata field %q: %w", capture.KeyPlan, err)
	}
	return p, p.Frames() > 0, nil
}

// captureOrientation returns the chip orientation a capture's metadata
// records, each chip's degrees (none: every chip at 0), and whether it
// records one: in its geometry (capture.KeyGeometry, as acquire writes
// it), or else in a simulator's ground truth.
func captureOrientation(m capture.Metadata) ([]int, bool, error) {
	var g struct {
		Orientation []int `json:"chip_orientation"`
	}
	ok, err := m.Get(capture.KeyGeometry, &g)
	if err != nil {
		return nil, false, err
	}
	if ok {
		return g.Orientation, true, nil
	}
	var truth struct {
		Orientation []int `json:"orientation"`
	}
	if found, err := m.Get(sim.TruthKey, &truth); err != nil || !found {
		return nil, false, nil // a truth that does not parse records none
	}
	return truth.Orientation, true, nil
}
