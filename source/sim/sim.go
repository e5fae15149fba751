// Package sim simulates the frames a Pi-mega detector sends during a scan,
// deterministically from a seed: dark fields, flat fields and projections of
// a 3-D phantom for tomography, or far-field speckle patterns for coherent
// diffraction imaging, with Poisson noise, in any frame format, plus a mix
// of faults (missing, duplicated, reordered and corrupt frames) for tests.
//
// A Scan writes a capture file (see package capture) whose metadata holds
// the ground truth under the key "simulation" (see Truth): the plan, the
// format, the faults, and the CRC-32C of every frame's expected image, so a
// replay can be checked without simulating again. Scan.Image regenerates
// the exact counts of any frame.
package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"h5ingest/frame"
	"h5ingest/plan"
)

// Scene is what the simulated detector looks at.
type Scene string

// The scenes the simulator knows.
const (
	Tomo Scene = "tomo" // dark fields, flat fields, then projections of a rotating phantom
	CDI  Scene = "cdi"  // far-field diffraction (speckle) of a small object
)

// FaultSpec chooses the frames a fault hits: those listed, plus each
// other frame with probability Rate (drawn from the scan's seed).
type FaultSpec struct {
	Frames []int
	Rate   float64
}

// Faults lists, in ascending order, the frames each fault hits in a scan.
type Faults struct {
	Missing   []int `json:"missing"`   // never written
	Duplicate []int `json:"duplicate"` // written twice in a row
	Reorder   []int `json:"reorder"`   // written after frame i+1 (swapped with it)
	Corrupt   []int `json:"corrupt"`   // one payload byte flipped after the payload CRC was computed
}

// Config describes a simulated scan. Start from DefaultConfig.
type Config struct {
	Scene       Scene
	Format      frame.Format
	Orientation frame.Orientation // nil: every chip at 0 degrees
	Module      uint16            // module_id of every frame
	Plan        plan.Plan         // the frames of a tomography scan
	Frames      int               // the frames of a CDI scan; tomography uses Plan
	FPS         float64           // frame rate: frame i is stamped StartNS + i*1e9/FPS
	StartNS     uint64            // timestamp of frame 0
	Seed        uint64

	// CDIPeak is the mean count of the brightest CDI pixel as a multiple of
	// the format's largest count; above 1 the centre saturates.
	CDIPeak float64

	Missing, Duplicate, Reorder, Corrupt FaultSpec
}

// DefaultConfig returns a tomography scan of one Pi-mega module, 24-bit
// bitplane payloads with LFSR counters, 10 darks, 10 flats and 100
// projections over 180 degrees at 1000 frames/s, without faults.
func DefaultConfig() Config {
	return Config{
		Scene:   Tomo,
		Format:  frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR},
		Plan:    plan.Tomo(10, 10, 100, 0, 180),
		Frames:  100,
		FPS:     1000,
		Seed:    1,
		CDIPeak: 1.5,
	}
}

// NumFrames returns the number of frames the scan plans.
func (c *Config) NumFrames() int {
	if c.Scene == Tomo {
		return c.Plan.Frames()
	}
	return c.Frames
}

// Validate reports whether the configuration describes a scan the
// simulator can run.
func (c *Config) Validate() error {
	if err := c.Format.Validate(); err != nil {
		return fmt.Errorf("format: %w", err)
	}
	if err := c.Orientation.Validate(c.Format.Chips()); err != nil {
		return err
	}
	switch c.Scene {
	case Tomo:
		if err := c.Plan.Validate(); err != nil {
			return err
		}
	case CDI:
		if c.Frames < 0 {
			return fmt.Errorf("%d frames: must not be negative", c.Frames)
		}
		if !(c.CDIPeak > 0) || math.IsInf(c.CDIPeak, 0) {
			return fmt.Errorf("CDI peak %v: must be positive", c.CDIPeak)
		}
	default:
		return fmt.Errorf("unknown scene %q (want %s or %s)", c.Scene, Tomo, CDI)
	}
	if c.NumFrames() < 1 {
		return errors.New("a scan needs at least one frame")
	}
	if !(c.FPS > 0) || math.IsInf(c.FPS, 0) {
		return fmt.Errorf("frame rate %v: must be positive", c.FPS)
	}
	n := c.NumFrames()
	for _, f := range []struct {
		name string
		spec FaultSpec
	}{{"missing", c.Missing}, {"duplicate", c.Duplicate}, {"reorder", c.Reorder}, {"corrupt", c.Corrupt}} {
		if !(f.spec.Rate >= 0 && f.spec.Rate <= 1) {
			return fmt.Errorf("%s rate %v: want 0 to 1", f.name, f.spec.Rate)
		}
		for _, i := range f.spec.Frames {
			if i < 0 || i >= n {
				return fmt.Errorf("%s frame %d: the scan has frames 0 to %d", f.name, i, n-1)
			}
		}
	}
	return nil
}

// Scan is a simulated scan, ready to produce frames. Its methods may be
// called from several goroutines at once.
type Scan struct {
	cfg    Config
	n      int
	period float64 // ns
	faults Faults
	order  []job // frames in the order they are written
	scene  scene
	keys   []int8    // image key of every frame
	angles []float64 // rotation angle of every frame, degrees
}

// scene computes the expected (noise-free) counts of a frame.
type scene interface {
	// expected writes the mean counts of frame i into mean (row-major
	// image, Height x Width); flux scales the beam.
	expected(i int, flux float64, mean []float32)
	// flux returns the relative beam intensity of a frame given one
	// standard normal draw.
	flux(z float64) float64
}

// Streams of random numbers, so that each use of the seed is independent
// of the others and of the order frames are made in.
const (
	streamNoise   = 0x6e6f697365 // per frame: flux, then pixel noise
	streamCorrupt = 0x636f7272   // per frame: which payload byte is flipped
	streamScene   = 0x7363656e65 // phantom details, dark map, CDI object
	streamFaults  = 0x6661756c74 // per fault kind: frames chosen by rate
)

// New checks cfg and prepares the scan (the phantom, or the CDI pattern).
func New(cfg Config) (*Scan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	cfg.Orientation = slices.Clone(cfg.Orientation)
	s := &Scan{cfg: cfg, n: cfg.NumFrames(), period: 1e9 / cfg.FPS,
		keys: cfg.Plan.ImageKeys(), angles: cfg.Plan.Angles()}
	s.faults = resolveFaults(&cfg, s.n)
	s.order = writeOrder(s.n, s.faults)
	switch cfg.Scene {
	case Tomo:
		s.scene = newTomo(&cfg)
	case CDI:
		s.scene = newCDI(&cfg)
	}
	return s, nil
}

// Config returns the scan's configuration.
func (s *Scan) Config() Config { return s.cfg }

// Frames returns the number of frames the scan plans.
func (s *Scan) Frames() int { return s.n }

// Faults returns the frames each fault hits. The caller must not modify it.
func (s *Scan) Faults() Faults { return s.faults }

// Timestamp returns the timestamp of frame i in nanoseconds.
func (s *Scan) Timestamp(i int) uint64 {
	return s.cfg.StartNS + uint64(math.Round(float64(i)*s.period))
}

// Angle returns the rotation angle of frame i in degrees: the projection's
// angle, or the start angle for darks and flats (and every CDI frame).
func (s *Scan) Angle(i int) float64 {
	if s.cfg.Scene != Tomo {
		return s.cfg.Plan.AngleStart
	}
	return s.angles[i]
}

// ImageKey returns frame i's NXtomo image key: 2 dark, 1 flat, 0 projection
// (and 0 for every CDI frame).
func (s *Scan) ImageKey(i int) int {
	if s.cfg.Scene != Tomo {
		return int(plan.Projection)
	}
	return int(s.keys[i])
}

// Image returns the counts of frame i (row-major, Height x Width), in dst
// when it is large enough, and whether any count was clipped to the
// format's largest count (the frame's FlagOverflow). It is the image a
// decoder must get from the frame's payload, unless the frame is corrupt.
func (s *Scan) Image(i int, dst []uint32) ([]uint32, bool) {
	g := newGenerator(s)
	return g.image(i, dst)
}

// resolveFaults turns the fault specs into lists of frames. Missing frames
// take no other fault; a reordered frame i needs a frame i+1 that is not
// missing and not already part of another swap.
func resolveFaults(c *Config, n int) Faults {
	pick := func(kind uint64, spec FaultSpec) []int {
		on := make([]bool, n)
		for _, i := range spec.Frames {
			on[i] = true
		}
		if spec.Rate > 0 {
			r := rand.New(rand.NewPCG(c.Seed^streamFaults, kind))
			for i := range on {
				if r.Float64() < spec.Rate {
					on[i] = true
				}
			}
		}
		var list []int
		for i, v := range on {
			if v {
				list = append(list, i)
			}
		}
		return list
	}
	f := Faults{Missing: pick(1, c.Missing)}
	missing := make([]bool, n)
	for _, i := range f.Missing {
		missing[i] = true
	}
	notMissing := func(list []int) []int {
		return slices.DeleteFunc(list, func(i int) bool { return missing[i] })
	}
	f.Duplicate = notMissing(pick(2, c.Duplicate))
	f.Corrupt = notMissing(pick(4, c.Corrupt))
	swapped := make([]bool, n)
	for _, i := range pick(3, c.Reorder) {
		if i+1 >= n || missing[i] || missing[i+1] || swapped[i] || swapped[i+1] {
			continue
		}
		swapped[i], swapped[i+1] = true, true
		f.Reorder = append(f.Reorder, i)
	}
	return f
}

// job is one frame to make and how many times to write it: 0 for a
// missing frame (made only for its checksum), 2 for a duplicate.
type job struct {
	frame  int
	copies int
}

// writeOrder returns every frame in the order the detector sends it.
func writeOrder(n int, f Faults) []job {
	copies := make([]int, n)
	for i := range copies {
		copies[i] = 1
	}
	for _, i := range f.Missing {
		copies[i] = 0
	}
	for _, i := range f.Duplicate {
		copies[i] = 2
	}
	order := make([]job, n)
	for i := range order {
		order[i] = job{frame: i, copies: copies[i]}
	}
	for _, i := range f.Reorder {
		order[i], order[i+1] = order[i+1], order[i]
	}
	return order
}
