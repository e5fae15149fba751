package sim

import (
	"math"
	"math/rand/v2"

	"h5ingest/plan"
)

// ellipsoid is one part of the phantom, turned about the vertical axis by
// Phi. Lengths are in units of half the image width, centred on the image
// centre; Mu is the attenuation per unit length, added to that of the
// parts it overlaps (so negative values carve holes).
type ellipsoid struct {
	X, Y, Z float64 // centre: horizontal, vertical (down), along the beam at angle 0
	A, B, C float64 // semi-axes along x, y (vertical), z
	Phi     float64 // radians
	Mu      float64
}

// phantom is a head-like 3-D phantom in the spirit of Shepp and Logan's: a
// dense shell, softer inside, with a few features of either sign.
var phantom = []ellipsoid{
	{0, 0, 0, 0.69, 0.85, 0.60, 0, 1.6},
	{0, -0.02, 0, 0.66, 0.82, 0.57, 0, -1.2},
	{-0.22, 0, 0.10, 0.11, 0.25, 0.16, 18 * math.Pi / 180, -0.3},
	{0.22, 0, -0.05, 0.16, 0.30, 0.20, -18 * math.Pi / 180, -0.3},
	{0, -0.35, 0.10, 0.21, 0.20, 0.25, 0, 0.2},
	{0.05, 0.30, -0.20, 0.05, 0.05, 0.05, 0, 1.5},
	{-0.10, 0.50, 0.10, 0.08, 0.06, 0.04, 0, 0.6},
	{0.30, -0.10, 0.25, 0.06, 0.12, 0.06, 0, 0.8},
}

// tomo is the tomography scene: a fixed dark map, a flat field with a
// gentle beam profile, and the phantom's Beer-Lambert transmission.
type tomo struct {
	w, h   int
	keys   []int8    // image key of every frame
	angles []float64 // rotation angle of every frame, degrees
	dark   []float32 // mean dark counts per pixel
	flat   []float32 // mean flat counts per pixel at flux 1
	scale  float64   // pixels per phantom unit
}

func newTomo(c *Config) *tomo {
	w, h := c.Format.Width(), c.Format.Height()
	max := float64(c.Format.MaxCount())
	flatLevel := math.Min(3000, 0.5*max)
	darkLevel := math.Min(2, 0.02*max)
	t := &tomo{w: w, h: h, keys: c.Plan.ImageKeys(), angles: c.Plan.Angles(), scale: float64(w) / 2,
		dark: make([]float32, w*h), flat: make([]float32, w*h)}
	r := rand.New(rand.NewPCG(c.Seed^streamScene, 1))
	for y := range h {
		v := (float64(y) + 0.5 - float64(h)/2) / (float64(h) / 2)
		for x := range w {
			u := (float64(x) + 0.5 - float64(w)/2) / (float64(w) / 2)
			beam := (1 - 0.15*v*v) * (1 - 0.08*u*u) * (1 + 0.01*math.Sin(9*u+4*v))
			t.flat[y*w+x] = float32(flatLevel * beam)
			t.dark[y*w+x] = float32(darkLevel * (0.5 + r.Float64()))
		}
	}
	return t
}

// flux models top-up and beam motion: a fraction of a percent per frame.
func (t *tomo) flux(z float64) float64 { return 1 + 0.003*z }

func (t *tomo) expected(i int, flux float64, mean []float32) {
	switch t.keys[i] {
	case plan.DarkField:
		copy(mean, t.dark)
		return
	case plan.FlatField:
		scaleInto(mean, t.flat, flux)
		return
	}
	scaleInto(mean, t.flat, flux)
	t.project(t.angles[i]*math.Pi/180, mean)
}

func scaleInto(dst, src []float32, k float64) {
	kf := float32(k)
	for p, v := range src {
		dst[p] = v * kf
	}
}

// ellipseAt is an ellipsoid's projection at one angle: its line integral
// at detector position u and height v is K*sqrt(A2*s - (u-S0)^2), where
// s = 1 - ((v-Y)/B)^2.
type ellipseAt struct {
	K, A2, S0 float64
	e         *ellipsoid
}

// project multiplies mean by the phantom's transmission at angle theta
// (radians): exp(-line integral) along rays parallel to the beam.
func (t *tomo) project(theta float64, mean []float32) {
	var parts [16]ellipseAt
	proj := parts[:0]
	for k := range phantom {
		e := &phantom[k]
		c, s := math.Cos(theta-e.Phi), math.Sin(theta-e.Phi)
		a2 := e.A*e.A*c*c + e.C*e.C*s*s
		proj = append(proj, ellipseAt{
			K: 2 * e.A * e.C * e.Mu / a2, A2: a2,
			S0: e.X*math.Cos(theta) + e.Z*math.Sin(theta), e: e,
		})
	}
	att := make([]float64, t.w)
	half := float64(t.w) / 2
	type span struct {
		x0, x1 int
		a2s    float64
	}
	var spans [len(parts)]span
	for y := range t.h {
		v := (float64(y) + 0.5 - float64(t.h)/2) / t.scale
		lo, hi := t.w, -1
		for k, pe := range proj {
			spans[k] = span{x0: 0, x1: -1}
			dy := (v - pe.e.Y) / pe.e.B
			s := 1 - dy*dy
			if s <= 0 {
				continue
			}
			a2s := pe.A2 * s
			r := math.Sqrt(a2s)
			x0 := max(0, int(math.Ceil((pe.S0-r)*t.scale+half-0.5)))
			x1 := min(t.w-1, int(math.Floor((pe.S0+r)*t.scale+half-0.5)))
			spans[k] = span{x0, x1, a2s}
			if x0 <= x1 {
				lo, hi = min(lo, x0), max(hi, x1)
			}
		}
		if lo > hi {
			continue
		}
		clear(att[lo : hi+1])
		for k, pe := range proj {
			sp := spans[k]
			for x := sp.x0; x <= sp.x1; x++ {
				d := (float64(x)+0.5-half)/t.scale - pe.S0
				if q := sp.a2s - d*d; q > 0 {
					att[x] += pe.K * math.Sqrt(q)
				}
			}
		}
		row := mean[y*t.w : (y+1)*t.w]
		for x := lo; x <= hi; x++ {
			if a := att[x]; a > 0 {
				row[x] *= expNegTable(a)
			}
		}
	}
}

// Transmission exp(-a) comes from a table with linear interpolation: far
// cheaper than math.Exp per pixel, and exact to a few parts in 10^7.
const (
	expTableMax   = 16
	expTableSteps = 512 // per unit of a
)

var expTable = func() []float32 {
	t := make([]float32, expTableMax*expTableSteps+2)
	for k := range t {
		t[k] = float32(math.Exp(-float64(k) / expTableSteps))
	}
	return t
}()

// expNegTable returns exp(-a) for a >= 0.
func expNegTable(a float64) float32 {
	if a >= expTableMax {
		return float32(math.Exp(-a))
	}
	pos := a * expTableSteps
	k := int(pos)
	frac := float32(pos - float64(k))
	return expTable[k] + frac*(expTable[k+1]-expTable[k])
}
