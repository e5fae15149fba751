package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// ffOptions is a processor's option struct, as a registry entry gives it.
type ffOptions struct {
	To   string        `mapstructure:"to"`
	Bin  int           `mapstructure:"bin"`
	Max  float64       `mapstructure:"max"`
	Wait time.Duration `mapstructure:"wait"`
}

// procNames are testNames with two processors: flatfield with options,
// mask without.
func procNames() Names {
	n := testNames
	n.Processors = []string{"mask", "flatfield"}
	n.CheckProcessor = func(index int, entry Processor) error {
		if entry.Name == "flatfield" {
			return entry.Decode(index, &ffOptions{To: "dataset", Bin: 1, Max: 2})
		}
		return entry.Decode(index, nil)
	}
	return n
}

// TestProcessorEntries loads output.processors given as names and as maps
// with options, and decodes the options into the processor's struct over
// its defaults.
func TestProcessorEntries(t *testing.T) {
	path := writeProfile(t, "output:\n  processors: [mask, {name: flatfield, bin: 4, wait: 100ms}]\n")
	p, err := Load(path, procNames())
	if err != nil {
		t.Fatal(err)
	}
	want := []Processor{{Name: "mask"}, {Name: "flatfield", Options: map[string]any{"bin": 4, "wait": "100ms"}}}
	if !reflect.DeepEqual(p.Output.Processors, want) {
		t.Fatalf("processors %#v, want %#v", p.Output.Processors, want)
	}
	o := &ffOptions{To: "dataset", Bin: 1, Max: 2}
	if err := p.Output.Processors[1].Decode(1, o); err != nil {
		t.Fatal(err)
	}
	if *o != (ffOptions{To: "dataset", Bin: 4, Max: 2, Wait: 100 * time.Millisecond}) {
		t.Errorf("options %+v", *o)
	}
	if got := p.Text()["output.processors"]; got != "[mask, {name: flatfield, bin: 4, wait: 100ms}]" {
		t.Errorf("text %s", got)
	}
	// The profile as profiles show writes it loads again.
	js, err := json.Marshal(p.Values())
	if err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(t.TempDir(), "again.json")
	if err := os.WriteFile(again, js, 0o644); err != nil {
		t.Fatal(err)
	}
	q, err := Load(again, procNames())
	if err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if got := q.Text()["output.processors"]; got != p.Text()["output.processors"] {
		t.Errorf("loads again as %s, want %s", got, p.Text()["output.processors"])
	}
	// And so does the environment's.
	t.Setenv("H5INGEST_OUTPUT_PROCESSORS", "[{name: flatfield, bin: 2}]")
	e, err := Load(path, procNames())
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Text()["output.processors"]; got != "[{name: flatfield, bin: 2}]" {
		t.Errorf("from the environment: %s", got)
	}
}

// TestProcessorEntriesRefused checks the entries a profile check refuses,
// each error naming the key.
func TestProcessorEntriesRefused(t *testing.T) {
	for _, c := range []struct {
		list, want string
	}{
		{"[{name: flatfield, bins: 4}]", "key output.processors[0].bins: unknown option of processor flatfield (it knows to, bin, max or wait)"},
		{"[mask, {name: flatfield, bin: four}]", "key output.processors[1].bin"},
		{"[{name: flatfield, bin: 1.5}]", "key output.processors[0].bin"},
		{"[{name: flatfield, wait: 5}]", "key output.processors[0].wait: 5, want a duration with its unit"},
		{"[{name: mask, level: 3}]", "key output.processors[0]: processor mask takes no options, and the entry sets level"},
		{"[{bin: 4}]", "its name under name"},
		{"[[flatfield]]", "a processor is its name or a map"},
		{"[blur]", "output.processors"},
	} {
		t.Run(c.list, func(t *testing.T) {
			_, err := Load(writeProfile(t, "output:\n  processors: "+c.list+"\n"), procNames())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
