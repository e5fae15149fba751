package scan

import (
	"path/filepath"
	"testing"
	"time"

	"h5ingest/registry"
	"h5ingest/writer"
)

// flatLayout is a facility's layout: one entry whose data group holds the
// frame stack and its records, at /entry/data/data.
type flatLayout struct{ name string }

func (l flatLayout) Name() string    { return l.name }
func (flatLayout) StackPath() string { return "/entry/data/data" }
func (flatLayout) Build(b *writer.Builder) error {
	entry := b.Group(b.Root(), "entry", "NXentry")
	b.Attr(entry, "default", "data")
	b.Header(entry, "entry")
	data := b.Group(entry, "data", "NXdata")
	b.Attr(data, "signal", "data")
	b.Stack(data)
	return nil
}

// TestInspectNamesRegisteredLayout inspects a file of a layout registered
// from outside: inspect names it by where its frame stack is, and says
// other where no registered layout, or several, put their stack there.
func TestInspectNamesRegisteredLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scan.h5")
	w, err := writer.Create(writer.Options{Path: path, Layout: flatLayout{"flat"}, Frames: 2, Height: 2, Width: 2,
		ElemSize: 2, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		layouts []string
		want    string
	}{
		{"registered", []string{"flat"}, "flat"},
		{"not registered", nil, writer.LayoutOther},
		{"two at its stack", []string{"flat", "flat2"}, writer.LayoutOther},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stages := stockStages()
			for _, name := range tt.layouts {
				l := flatLayout{name}
				if err := stages.AddLayout(registry.Layout{Name: name, New: func() writer.Layout { return l }}); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := Inspect(stages, path)
			if err != nil {
				t.Fatal(err)
			}
			if rep.File == nil || rep.File.Layout != tt.want {
				t.Errorf("inspect: %+v, want layout %s", rep.File, tt.want)
			}
		})
	}
}
