package writer

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"h5ingest/frame"
)

// columnsLayout is a facility's layout: one NeXus entry with the frame
// stack, the image keys and angles of the plan, and a column of its own.
type columnsLayout struct{}

func (columnsLayout) Name() string      { return "beamline" }
func (columnsLayout) StackPath() string { return "/entry/scan/data" }
func (columnsLayout) Build(b *Builder) error {
	entry := b.Group(b.Root(), "entry", "NXentry")
	b.Attr(entry, "default", "scan")
	b.Header(entry, "entry")
	g := b.Group(entry, "scan", "NXdata")
	b.Attr(g, "signal", "data")
	b.Stack(g)
	b.Column(g, "key", ColumnImageKey)
	b.Column(b.Group(entry, "sample", "NXsample"), "omega", ColumnRotationAngle)
	b.FloatColumn(g, "energy", "keV", func(n int) float64 { return 10 + float64(n)/10 })
	return nil
}

// TestLayoutColumns checks that a layout not h5ingest's stores the plan's
// image keys and angles, and values of its own, through the Builder, for
// a scan planned and one of open length, and that the Reader finds the
// plan's values where the layout put them.
func TestLayoutColumns(t *testing.T) {
	keys := []int8{2, 1, 0, 0, 0}
	angles := []float64{0, 0, 0, 60, 120}
	for _, planned := range []int{len(keys), 0} {
		t.Run(fmt.Sprintf("planned=%d", planned), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "scan.h5")
			w, err := Create(Options{Path: path, Layout: columnsLayout{}, Frames: planned, Height: 2, Width: 4, ElemSize: 2,
				FlushInterval: time.Hour, ImageKey: keys, RotationAngle: angles})
			if err != nil {
				t.Fatal(err)
			}
			for n := range keys {
				if err := w.WriteChunk(n, 0, make([]byte, 16)); err != nil {
					t.Fatal(err)
				}
				if err := w.SetRecord(n, frame.Record{DataCRC: frame.Checksum(make([]byte, 16))}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := OpenPlain(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			gotKeys, err := r.ImageKey()
			if err != nil || !slices.Equal(gotKeys, keys) {
				t.Errorf("image keys %v (%v), want %v", gotKeys, err, keys)
			}
			gotAngles, err := r.RotationAngle()
			if err != nil || !slices.Equal(gotAngles, angles) {
				t.Errorf("angles %v (%v), want %v", gotAngles, err, angles)
			}
			if tr, err := r.Translation(); tr != nil || err != nil {
				t.Errorf("translations %v (%v) of a layout that stores none", tr, err)
			}
			energy, err := readColumn[float64](r, "/entry/scan/energy", kindF64, 1)
			if want := []float64{10, 10.1, 10.2, 10.3, 10.4}; err != nil || !slices.Equal(energy, want) {
				t.Errorf("the layout's own column %v (%v), want %v", energy, err, want)
			}
		})
	}
}
