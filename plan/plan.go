// Package plan describes what a scan records frame by frame: which frames
// are dark fields, flat fields and projections, in which order, and the
// rotation angle of each. Profiles, flags and the simulator all give plans
// in these terms, and the output files record them as NXtomo image keys and
// angles.
package plan

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Image keys, as NXtomo records them per frame.
const (
	Projection int8 = 0
	FlatField  int8 = 1
	DarkField  int8 = 2
	Invalid    int8 = 3
)

// Step is a run of frames of one kind in a scan plan.
type Step struct {
	Key   int8 `json:"key"` // Projection, FlatField or DarkField
	Count int  `json:"count"`
}

// Plan is what a scan records, frame by frame: which frames are darks,
// flats and projections, and the rotation angle of each projection.
type Plan struct {
	Steps []Step `json:"steps"`
	// Projections are taken at AngleStart + i*(AngleEnd-AngleStart)/n for
	// the n projections of the plan, the end excluded; darks and flats are
	// recorded at AngleStart. Degrees.
	AngleStart float64 `json:"angle_start"`
	AngleEnd   float64 `json:"angle_end"`
	// Positions are the sample's scan positions, x, y, z in metres, one
	// per frame (ptychography); nil where the sample does not move.
	Positions [][3]float64 `json:"positions,omitempty"`
}

// Tomo returns the usual tomography plan: darks, then flats, then
// projections over [start, end) degrees.
func Tomo(darks, flats, projections int, start, end float64) Plan {
	var steps []Step
	for _, s := range []Step{{DarkField, darks}, {FlatField, flats}, {Projection, projections}} {
		if s.Count > 0 {
			steps = append(steps, s)
		}
	}
	return Plan{Steps: steps, AngleStart: start, AngleEnd: end}
}

// Frames returns the number of frames of the plan.
func (p Plan) Frames() int {
	n := 0
	for _, s := range p.Steps {
		n += s.Count
	}
	return n
}

// Count returns the number of frames of the plan with the given key.
func (p Plan) Count(key int8) int {
	n := 0
	for _, s := range p.Steps {
		if s.Key == key {
			n += s.Count
		}
	}
	return n
}

// MaxFrames is the most frames a plan may hold: nearly three hours of a
// detector at 1000 frames/s. The records of every planned frame (a few
// dozen bytes each) are held in memory while the scan is written.
const MaxFrames = 10_000_000

// ErrTooLong reports a plan of more than MaxFrames frames.
var ErrTooLong = fmt.Errorf("more than the %d frames one scan may hold", MaxFrames)

// Validate reports a plan that cannot be recorded.
func (p Plan) Validate() error {
	if !finite(p.AngleStart) || !finite(p.AngleEnd) {
		return fmt.Errorf("angles %v to %v: must be finite", p.AngleStart, p.AngleEnd)
	}
	// Each angle lies between the two, but the step between them is their
	// difference, which overflows for angles near the largest float64.
	if !finite(p.AngleEnd - p.AngleStart) {
		return fmt.Errorf("angles %v to %v: the rotation between them is not a finite number of degrees", p.AngleStart, p.AngleEnd)
	}
	total := 0
	for i, s := range p.Steps {
		if s.Count < 0 {
			return fmt.Errorf("plan step %d: %d frames: counts must not be negative", i+1, s.Count)
		}
		if s.Count > MaxFrames-total {
			return fmt.Errorf("plan step %d: %d frames: %w", i+1, s.Count, ErrTooLong)
		}
		total += s.Count
		if s.Key != Projection && s.Key != FlatField && s.Key != DarkField {
			return fmt.Errorf("plan step %d: image key %d, want 0 projection, 1 flat or 2 dark", i+1, s.Key)
		}
	}
	return nil
}

// finite reports whether x is neither NaN nor an infinity.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// ImageKeys returns the image key of every frame of the plan.
func (p Plan) ImageKeys() []int8 {
	keys := make([]int8, 0, p.Frames())
	for _, s := range p.Steps {
		for range s.Count {
			keys = append(keys, s.Key)
		}
	}
	return keys
}

// Angles returns the rotation angle of every frame of the plan, in degrees.
func (p Plan) Angles() []float64 {
	n := p.Count(Projection)
	angles := make([]float64, 0, p.Frames())
	span := p.AngleEnd - p.AngleStart
	// i*span overflows where the angles are near the largest float64;
	// (i/n)*span then, which does not. Elsewhere i*span/n, which rounds
	// once.
	huge := math.IsInf(float64(n)*span, 0)
	i := 0
	for _, s := range p.Steps {
		for range s.Count {
			a := p.AngleStart
			if s.Key == Projection {
				if huge {
					a += float64(i) / float64(n) * span
				} else {
					a += float64(i) * span / float64(n)
				}
				i++
			}
			angles = append(angles, a)
		}
	}
	return angles
}

// String describes the plan in one line, e.g. "10 darks, 10 flats, 180
// projections over 0..180 degrees".
func (p Plan) String() string {
	names := map[int8]string{DarkField: "darks", FlatField: "flats", Projection: "projections"}
	var parts []string
	for _, s := range p.Steps {
		parts = append(parts, fmt.Sprintf("%d %s", s.Count, names[s.Key]))
	}
	if len(parts) == 0 {
		return "no frames"
	}
	return fmt.Sprintf("%s over %g..%g degrees", strings.Join(parts, ", "), p.AngleStart, p.AngleEnd)
}

// ParseSequence reads a plan sequence such as "flats:20,projections:1800".
func ParseSequence(s string) ([]Step, error) {
	kinds := map[string]int8{"darks": DarkField, "flats": FlatField, "projections": Projection}
	var steps []Step
	for _, part := range strings.Split(s, ",") {
		kind, count, ok := strings.Cut(strings.TrimSpace(part), ":")
		key, known := kinds[kind]
		n, err := strconv.Atoi(count)
		if !ok || !known || err != nil || n < 0 || strconv.Itoa(n) != count {
			return nil, fmt.Errorf("%q: want kind:count with kind darks, flats or projections and a count of 0 or more", part)
		}
		steps = append(steps, Step{Key: key, Count: n})
	}
	return steps, nil
}

// ReadPositions reads scan positions, one frame a line, as "x,y" or
// "x,y,z" in metres (z is 0 where absent). Blank lines and lines starting
// with # are skipped, and so is a first line that is a header (x,y,z).
func ReadPositions(r io.Reader) ([][3]float64, error) {
	var pos [][3]float64
	sc := bufio.NewScanner(r)
	first := true // the first line that is not blank or a comment
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		header := first
		first = false
		fields := strings.Split(text, ",")
		if len(fields) < 2 || len(fields) > 3 {
			return nil, fmt.Errorf("line %d: %d fields, want x,y or x,y,z in metres", line, len(fields))
		}
		var p [3]float64
		for i, f := range fields {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				if header && i == 0 && err != nil {
					break
				}
				return nil, fmt.Errorf("line %d: %q is not a position in metres", line, strings.TrimSpace(f))
			}
			p[i] = v
			if i == len(fields)-1 {
				pos = append(pos, p)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(pos) == 0 {
		return nil, errors.New("no positions")
	}
	return pos, nil
}
