package preview

import (
	"encoding/binary"
	"image/color"
	"testing"
)

func TestColormapEnds(t *testing.T) {
	tests := []struct {
		v    float64
		want color.RGBA
	}{
		{-1, colormapStops[0]},
		{0, colormapStops[0]},
		{1, colormapStops[len(colormapStops)-1]},
		{2, colormapStops[len(colormapStops)-1]},
	}
	for _, tt := range tests {
		if got := Colormap(tt.v); got != tt.want {
			t.Errorf("Colormap(%g) = %v, want %v", tt.v, got, tt.want)
		}
	}
	// Brightness grows along the map.
	prev := -1.0
	for i := range 11 {
		c := Colormap(float64(i) / 10)
		l := 0.2126*float64(c.R) + 0.7152*float64(c.G) + 0.0722*float64(c.B)
		if l <= prev {
			t.Errorf("luminance at %d/10 = %.1f, not above %.1f", i, l, prev)
		}
		prev = l
	}
}

func TestRender(t *testing.T) {
	const h, w = 40, 60
	data := make([]byte, h*w*4)
	binary.LittleEndian.PutUint32(data[4*(10*w+20):], 1_000_000) // one bright pixel
	f := Frame{Data: data, Height: h, Width: w, ElemSize: 4}

	img, err := Render(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("bounds %v, want %dx%d", b, w, h)
	}
	if got := img.RGBAAt(20, 10); got != Colormap(1) {
		t.Errorf("brightest pixel %v, want %v", got, Colormap(1))
	}
	if got := img.RGBAAt(0, 0); got != Colormap(0) {
		t.Errorf("empty pixel %v, want %v", got, Colormap(0))
	}

	small, err := Render(f, Options{MaxSide: 20, ColorBar: true})
	if err != nil {
		t.Fatal(err)
	}
	// 60 wide shrinks by 3 to 20, plus the bar; the bar needs some height.
	if b := small.Bounds(); b.Dx() != 20+colorBarWidth || b.Dy() != 120 {
		t.Errorf("bounds %v, want %dx120", b, 20+colorBarWidth)
	}
	if got := small.RGBAAt(20/3, 10/3); got != Colormap(1) {
		t.Errorf("block holding the bright pixel %v, want %v", got, Colormap(1))
	}
	if _, err := Render(Frame{Data: data[:10], Height: h, Width: w, ElemSize: 4}, Options{}); err == nil {
		t.Error("short data accepted")
	}
	if _, err := Render(Frame{Data: data, Height: h, Width: w, ElemSize: 3}, Options{}); err == nil {
		t.Error("3-byte pixels accepted")
	}
}

func TestCountLabel(t *testing.T) {
	for v, want := range map[float64]string{1: "1", 100: "100", 1e3: "1k", 1520: "1.52k", 1e4: "10k", 1e6: "1M", 1e7: "10M"} {
		if got := countLabel(v); got != want {
			t.Errorf("countLabel(%g) = %q, want %q", v, got, want)
		}
	}
}
