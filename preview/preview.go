// Package preview renders detector frames as pictures for people: counts on
// a logarithmic colour scale, with a colour bar, shrunk to a size a screen
// or a logbook takes.
package preview

import (
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"slices"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Options control a rendering.
type Options struct {
	// MaxSide bounds the longer side of the frame in the picture, in
	// pixels; larger frames are shrunk by averaging blocks. 0 keeps every
	// pixel.
	MaxSide int
	// ColorBar adds a colour bar with labelled counts at the right.
	ColorBar bool
}

// Frame is one decoded frame: row-major little-endian pixels.
type Frame struct {
	Data          []byte
	Height, Width int
	ElemSize      int // 2 or 4
}

// at returns the count of pixel (y, x).
func (f Frame) at(y, x int) uint32 {
	i := y*f.Width + x
	if f.ElemSize == 2 {
		return uint32(binary.LittleEndian.Uint16(f.Data[2*i:]))
	}
	return binary.LittleEndian.Uint32(f.Data[4*i:])
}

// Render draws the frame on a log scale: black for no counts, through the
// colour map to the brightest pixel.
func Render(f Frame, opts Options) (*image.RGBA, error) {
	if f.ElemSize != 2 && f.ElemSize != 4 {
		return nil, fmt.Errorf("render frame: %d-byte pixels, want 2 or 4", f.ElemSize)
	}
	if f.Height <= 0 || f.Width <= 0 || len(f.Data) < f.Height*f.Width*f.ElemSize {
		return nil, fmt.Errorf("render frame: %d bytes for %dx%d pixels of %d bytes", len(f.Data), f.Height, f.Width, f.ElemSize)
	}
	step := 1
	if side := max(f.Height, f.Width); opts.MaxSide > 0 && side > opts.MaxSide {
		step = (side + opts.MaxSide - 1) / opts.MaxSide
	}
	h, w := (f.Height+step-1)/step, (f.Width+step-1)/step
	means := make([]float64, h*w)
	for y := range h {
		for x := range w {
			sum, n := 0.0, 0
			for yy := y * step; yy < min((y+1)*step, f.Height); yy++ {
				for xx := x * step; xx < min((x+1)*step, f.Width); xx++ {
					sum += float64(f.at(yy, xx))
					n++
				}
			}
			means[y*w+x] = sum / float64(n)
		}
	}
	s := newScale(means)
	barWidth := 0
	if opts.ColorBar {
		barWidth = colorBarWidth
	}
	img := image.NewRGBA(image.Rect(0, 0, w+barWidth, max(h, minBarHeight(opts))))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, Colormap(s.at(means[y*w+x])))
		}
	}
	if opts.ColorBar {
		drawColorBar(img, w, max(h, minBarHeight(opts)), s)
	}
	return img, nil
}

func minBarHeight(opts Options) int {
	if opts.ColorBar {
		return 120
	}
	return 0
}

// colorBarWidth is the width of the colour bar with its labels.
const colorBarWidth = 80

// scale maps counts to [0, 1] on a log scale between a low and a high
// percentile of the picture, so that a few hot or dead pixels do not wash
// out the rest.
type scale struct{ lo, hi float64 }

// Percentiles of the pixels that the colour map's ends stand for.
const (
	lowPercentile  = 0.5
	highPercentile = 99.9
)

func newScale(values []float64) scale {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	pick := func(p float64) float64 { return sorted[int(p/100*float64(len(sorted)-1))] }
	lo, hi := pick(lowPercentile), pick(highPercentile)
	if hi <= lo {
		hi = lo + 1
	}
	return scale{lo: lo, hi: hi}
}

// at returns v's position on the scale.
func (s scale) at(v float64) float64 {
	return (math.Log1p(v) - math.Log1p(s.lo)) / (math.Log1p(s.hi) - math.Log1p(s.lo))
}

// drawColorBar draws the bar at x0 over height h, labelled with its ends and
// the powers of ten between them.
func drawColorBar(img *image.RGBA, x0, h int, s scale) {
	const pad, barW = 8, 14
	y0, y1 := pad, h-pad
	for y := y0; y < y1; y++ {
		c := Colormap(1 - float64(y-y0)/float64(y1-y0-1))
		for x := x0 + pad; x < x0+pad+barW; x++ {
			img.SetRGBA(x, y, c)
		}
	}
	d := font.Drawer{Dst: img, Src: image.NewUniform(color.Black), Face: basicfont.Face7x13}
	label := func(v float64, text string) {
		y := y1 - 1 - int(s.at(v)*float64(y1-y0-1))
		for x := x0 + pad + barW; x < x0+pad+barW+3; x++ {
			img.SetRGBA(x, y, color.RGBA{A: 255})
		}
		d.Dot = fixed.P(x0+pad+barW+7, y+4) // a gap after the tick, so it does not read as a minus sign
		d.DrawString(text)
	}
	label(s.lo, countLabel(math.Round(s.lo)))
	label(s.hi, countLabel(math.Round(s.hi)))
	for v := 1.0; v < s.hi; v *= 10 {
		// Powers of ten well inside the ends, so labels do not overlap.
		if p := s.at(v); p > 0.08 && p < 0.92 {
			label(v, countLabel(v))
		}
	}
}

// countLabel writes a count compactly: 1, 100, 1k, 1.5k, 10k, 1M.
func countLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// colormapStops is a perceptually ordered dark-to-bright map (black, deep
// blue, purple, orange, pale yellow), as people read intensity maps.
var colormapStops = []color.RGBA{
	{0, 0, 0, 255},
	{40, 11, 84, 255},
	{101, 21, 110, 255},
	{159, 42, 99, 255},
	{212, 72, 66, 255},
	{245, 125, 21, 255},
	{250, 193, 39, 255},
	{252, 255, 164, 255},
}

// Colormap returns the colour of v in [0, 1]; values outside are clamped.
func Colormap(v float64) color.RGBA {
	if !(v > 0) {
		return colormapStops[0]
	}
	if v >= 1 {
		return colormapStops[len(colormapStops)-1]
	}
	pos := v * float64(len(colormapStops)-1)
	i := int(pos)
	t := pos - float64(i)
	a, b := colormapStops[i], colormapStops[i+1]
	mix := func(p, q uint8) uint8 { return uint8(float64(p) + t*(float64(q)-float64(p)) + 0.5) }
	return color.RGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), 255}
}
