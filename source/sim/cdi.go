package sim

import (
	"math"
	"math/bits"
	"math/cmplx"
	"math/rand/v2"
)

// cdi is the coherent diffraction scene: the far-field intensity
// |FFT(object)|^2 of a small object, computed once per scan and scaled so
// that its brightest pixel has a mean of CDIPeak times the largest count.
// Frames differ by their noise and by a few percent of flux.
type cdi struct {
	pattern []float32 // mean counts per pixel at flux 1
}

func newCDI(c *Config) *cdi {
	w, h := c.Format.Width(), c.Format.Height()
	n := 1 << bits.Len(uint(max(w, h)-1)) // FFT size: a power of two covering the image
	obj := makeObject(n, max(w, h), c.Seed)
	fft2(obj, n)
	pattern := make([]float32, w*h)
	peak := 0.0
	for y := range h {
		// fftshift: the zero frequency lands at pixel (h/2, w/2).
		fy := (y - h/2 + n) % n
		for x := range w {
			fx := (x - w/2 + n) % n
			v := obj[fy*n+fx]
			i := real(v)*real(v) + imag(v)*imag(v)
			pattern[y*w+x] = float32(i)
			peak = max(peak, i)
		}
	}
	if peak > 0 {
		scaleInto(pattern, pattern, c.CDIPeak*float64(c.Format.MaxCount())/peak)
	}
	return &cdi{pattern: pattern}
}

// makeObject returns an n x n complex image holding an object of a few
// random overlapping soft-edged ellipses with a gentle phase, inside a disc of
// diameter size/8 at the centre.
func makeObject(n, size int, seed uint64) []complex128 {
	r := rand.New(rand.NewPCG(seed^streamScene, 2))
	radius := max(2, float64(size)/16)
	type blob struct{ x, y, a, b, cos, sin, amp float64 }
	blobs := make([]blob, 5+r.IntN(4))
	for k := range blobs {
		th := r.Float64() * math.Pi
		rr := radius * 0.5 * math.Sqrt(r.Float64())
		ph := r.Float64() * 2 * math.Pi
		blobs[k] = blob{
			x: rr * math.Cos(ph), y: rr * math.Sin(ph),
			a: radius * (0.2 + 0.3*r.Float64()), b: radius * (0.1 + 0.3*r.Float64()),
			cos: math.Cos(th), sin: math.Sin(th), amp: 0.3 + 0.7*r.Float64(),
		}
	}
	obj := make([]complex128, n*n)
	c := float64(n) / 2
	// The disc may be larger than a tiny image: keep to the image.
	lim := int(radius) + 1
	for y := max(0, n/2-lim); y <= min(n-1, n/2+lim); y++ {
		for x := max(0, n/2-lim); x <= min(n-1, n/2+lim); x++ {
			dx, dy := float64(x)-c, float64(y)-c
			if dx*dx+dy*dy > radius*radius {
				continue
			}
			amp := 0.0
			for _, b := range blobs {
				u := ((dx-b.x)*b.cos + (dy-b.y)*b.sin) / b.a
				v := (-(dx-b.x)*b.sin + (dy-b.y)*b.cos) / b.b
				if r2 := u*u + v*v; r2 < 1 {
					amp += b.amp * (1 - r2) // soft edges, as real particles have
				}
			}
			if amp > 0 {
				obj[y*n+x] = cmplx.Rect(amp, 0.4*amp)
			}
		}
	}
	return obj
}

// flux varies by a few percent from frame to frame.
func (c *cdi) flux(z float64) float64 { return max(0.5, 1+0.03*z) }

func (c *cdi) expected(_ int, flux float64, mean []float32) {
	scaleInto(mean, c.pattern, flux)
}

// fft2 replaces the n x n image a (row-major, n a power of two) by its 2-D
// discrete Fourier transform. Rows that are all zero stay zero.
func fft2(a []complex128, n int) {
	tw := twiddles(n)
	for y := range n {
		row := a[y*n : (y+1)*n]
		if !allZero(row) {
			fft(row, tw)
		}
	}
	col := make([]complex128, n)
	for x := range n {
		for y := range n {
			col[y] = a[y*n+x]
		}
		fft(col, tw)
		for y := range n {
			a[y*n+x] = col[y]
		}
	}
}

func allZero(v []complex128) bool {
	for _, c := range v {
		if c != 0 {
			return false
		}
	}
	return true
}

// twiddles returns exp(-2 pi i k/n) for k < n/2.
func twiddles(n int) []complex128 {
	tw := make([]complex128, n/2)
	for k := range tw {
		s, c := math.Sincos(-2 * math.Pi * float64(k) / float64(n))
		tw[k] = complex(c, s)
	}
	return tw
}

// fft transforms a in place (forward, unscaled); len(a) is a power of two
// and tw = twiddles(len(a)).
func fft(a []complex128, tw []complex128) {
	n := len(a)
	if n < 2 {
		return
	}
	shift := 64 - bits.Len(uint(n-1))
	for i := range n {
		j := int(bits.Reverse64(uint64(i)) >> shift)
		if i < j {
			a[i], a[j] = a[j], a[i]
		}
	}
	for size := 2; size <= n; size <<= 1 {
		half, step := size/2, n/size
		for start := 0; start < n; start += size {
			for k := range half {
				t := tw[k*step] * a[start+k+half]
				a[start+k+half] = a[start+k] - t
				a[start+k] += t
			}
		}
	}
}
