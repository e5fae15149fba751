package config

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestFlagSet(t *testing.T) {
	names := Names{Backends: []string{"auto", "cpu", "cuda"}, Codecs: []string{"bslz4", "none"}, Layouts: []string{"nxtomo", "cxi"},
		Transports: []string{"fabric"}, CodecInfo: map[string]CodecInfo{"none": {MinLevel: 1, MaxLevel: 9}}}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	s := NewFlagSet(fs)
	s.Add(names,
		Flag{Name: "compression", Key: "output.compression"},
		Flag{Name: "level", Key: "output.level", Help: "compression level"},
		Flag{Name: "overwrite", Key: "output.overwrite", Help: "replace"},
		Flag{Name: "angle-end", Key: "plan.angle_end", Help: "end"},
		Flag{Name: "flush", Key: "output.flush_interval", Help: "flush"},
		Flag{Name: "layout", Key: "output.layout"},
	)
	fs.String("other", "x", "a flag of the command alone")
	fs.Int("slots", 7, "ring slots")
	s.Bind("slots", "source.ring_slots")

	d := Default()
	if f := fs.Lookup("flush"); f.DefValue != d.Output.FlushInterval.String() {
		t.Errorf("--flush default %s, want the profile default %v", f.DefValue, d.Output.FlushInterval)
	}
	if f := fs.Lookup("compression"); f.DefValue != d.Output.Compression || !strings.HasSuffix(f.Usage, ": bslz4 or none") {
		t.Errorf("--compression: default %q, help %q", f.DefValue, f.Usage)
	}
	if f := fs.Lookup("level"); f.Usage != "compression level (none 1 to 9)" { // what the names allow, after the flag's own help
		t.Errorf("--level help %q", f.Usage)
	}

	err := fs.Parse([]string{"--compression", "none", "--level=3", "--overwrite", "--angle-end", "360", "--flush", "2s",
		"--other", "y", "--slots", "64"})
	if err != nil {
		t.Fatal(err)
	}
	values, err := s.Values()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"output.compression": "none", "output.level": 3, "output.overwrite": true,
		"plan.angle_end": 360.0, "output.flush_interval": 2 * time.Second, "source.ring_slots": 64}
	if len(values) != len(want) {
		t.Errorf("values %v, want the %d given flags that set keys", values, len(want))
	}
	for k, v := range want {
		if got := values[k]; got.Value != v || got.Flag == "" {
			t.Errorf("%s = %#v, want %#v", k, got, v)
		}
	}
	p, _, err := LoadLayers(Layers{Flags: values, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	if p.Output.Compression != "none" || p.Output.Level != 3 || !p.Output.Overwrite || p.Plan.AngleEnd != 360 ||
		p.Output.FlushInterval != 2*time.Second || p.Source.RingSlots != 64 || p.Output.Layout != d.Output.Layout {
		t.Errorf("profile from the flags: %+v %+v", p.Output, p.Plan)
	}
}

func TestFlagSetRefusesUnknownKeys(t *testing.T) {
	for _, f := range []Flag{{Name: "x", Key: "output.no_such_key"}, {Name: "modules", Key: "detector.modules"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Add(%+v) did not panic", f)
				}
			}()
			NewFlagSet(pflag.NewFlagSet("test", pflag.ContinueOnError)).Add(Names{}, f)
		}()
	}
}
