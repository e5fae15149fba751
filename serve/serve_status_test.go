package serve

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/pipeline"
	"h5ingest/scan/scantest"
	"h5ingest/service"
)

// profilesDir writes profile files to a new directory: name -> text.
func profilesDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRunnerProfiles: the service lists the built-in profiles and the
// .yaml and .yml files of its profiles directory by the names an arm
// gives (no extension), with the errors of those that do not load; it
// shows one as profiles show does; and an arm names a file with or
// without its .yaml.
func TestRunnerProfiles(t *testing.T) {
	dir := profilesDir(t, map[string]string{
		"beam.yaml":    "name: beam\ndescription: a test beamline\noutput:\n  compression: lz4\n",
		"other.yml":    "description: another\n",
		"bad.yaml":     "output: [unclosed\n",
		"default.yaml": "description: shadowed\n",
		"notes.txt":    "not a profile\n",
		".hidden.yaml": "description: hidden\n",
	})
	r := &Runner{Profiles: dir, Stages: scantest.Stages(t)}
	list, err := r.ListProfiles()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]service.ProfileInfo{}
	var order []string
	for _, p := range list {
		got[p.Name] = p
		order = append(order, p.Name+"/"+p.Source)
	}
	builtin := len(config.BuiltinNames())
	if len(list) != builtin+4 {
		t.Errorf("listed %v", order)
	}
	if p := got["beam"]; p.Source != "file" || p.Description != "a test beamline" || p.Error != "" || len(p.Modules) != 1 {
		t.Errorf("beam: %+v", p)
	}
	if p := got["other"]; p.Description != "another" || p.Error != "" {
		t.Errorf("other: %+v", p)
	}
	if p := got["bad"]; p.Error == "" || !strings.Contains(p.Error, "YAML") {
		t.Errorf("bad: %+v", p)
	}
	if strings.Join(order[builtin:], " ") != "bad/file beam/file default/file other/file" || order[0] != "default/built-in" {
		t.Errorf("order %v: the built-in profiles, then the files by name", order)
	}
	shadowed := 0
	for _, p := range list {
		if p.Name == "default" && p.Source == "file" && strings.Contains(p.Error, "built-in") {
			shadowed++
		}
	}
	if shadowed != 1 {
		t.Errorf("default.yaml beside the built-in default: %v", order)
	}

	d, err := r.ShowProfile("beam")
	if err != nil {
		t.Fatal(err)
	}
	want, sources, err := config.LoadLayers(config.Layers{Profile: filepath.Join(dir, "beam.yaml"), Names: r.Stages.Names()})
	if err != nil {
		t.Fatal(err)
	}
	keys := ProfileKeys(want, sources, r.Stages.Names())
	if d.Source != "file" || len(d.Keys) != len(config.Keys) || len(keys) != len(d.Keys) {
		t.Fatalf("beam: %+v", d)
	}
	for i, k := range d.Keys {
		if k.Key != keys[i].Key || k.Value != keys[i].Value || k.From != keys[i].From {
			t.Errorf("key %d: %+v, want %+v", i, k, keys[i])
		}
		if k.Key == "output.compression" && (k.Value != `"lz4"` || !strings.Contains(k.From, "beam.yaml") || len(k.OneOf) < 2) {
			t.Errorf("output.compression: %+v", k)
		}
	}
	for name, noSuch := range map[string]bool{"nope": true, "../beam": true, "beam/": true, "notes": true, "bad": false, "": true} {
		_, err := r.ShowProfile(name)
		if err == nil || errors.Is(err, service.ErrNoProfile) != noSuch {
			t.Errorf("show %q: %v, want no such profile: %v", name, err, noSuch)
		}
	}
	if d, err := r.ShowProfile("default"); err != nil || d.Source != "built-in" {
		t.Errorf("default: %+v %v", d, err)
	}
	// The serve's live stream is every scan's.
	r.Stream = "tcp://127.0.0.1:31001"
	d, _ = r.ShowProfile("default")
	for _, k := range d.Keys {
		if k.Key == "stream.address" && (k.Value != `"tcp://127.0.0.1:31001"` || k.From != "serve --stream") {
			t.Errorf("stream.address: %+v", k)
		}
	}

	// An arm names a file with or without its extension.
	for _, name := range []string{"beam", "beam.yaml", "other", "other.yml"} {
		p, _, err := r.load(service.ArmRequest{Profile: name, ScanID: "x"})
		if err != nil || p.Description != map[bool]string{true: "a test beamline", false: "another"}[strings.HasPrefix(name, "beam")] {
			t.Errorf("arm with profile %q: %v %q", name, err, p.Description)
		}
	}
	if _, _, err := r.load(service.ArmRequest{Profile: "notes", ScanID: "x"}); err == nil {
		t.Error("an arm with profile notes (notes.txt) loaded")
	}
}

// TestRateMeter: rates over the last second of reports while a scan runs,
// over the whole scan at its end.
func TestRateMeter(t *testing.T) {
	var m rateMeter
	t0 := time.Unix(1000, 0)
	at := func(q int) time.Time { return t0.Add(time.Duration(q) * 250 * time.Millisecond) }
	progress := func(frames int) pipeline.Progress {
		p := pipeline.Progress{Written: frames, RawBytes: int64(frames) * 4e6, StoredBytes: int64(frames) * 1e6}
		p.Received = frames
		return p
	}
	if r := m.add(progress(0), at(0)); r != (service.Rates{}) {
		t.Errorf("first report: %+v", r)
	}
	// 100 frames a second for a second, then 400 a second.
	frames := 0
	var r service.Rates
	for q := 1; q <= 4; q++ {
		frames += 25
		r = m.add(progress(frames), at(q))
	}
	if r.FramesPerSecond != 100 || r.ReceivedMBPerSecond != 400 || r.StoredMBPerSecond != 100 || r.WindowSeconds != 1 {
		t.Errorf("after a second at 100 frames/s: %+v", r)
	}
	for q := 5; q <= 8; q++ {
		frames += 100
		r = m.add(progress(frames), at(q))
	}
	if r.FramesPerSecond != 400 || r.WrittenPerSecond != 400 || r.WindowSeconds != 1 {
		t.Errorf("after a second at 400 frames/s: %+v", r)
	}
	p := progress(frames)
	p.Elapsed = 2 * time.Second
	if a := averageRates(p); a.FramesPerSecond != 250 || math.Abs(a.StoredMBPerSecond-250) > 1e-9 || a.WindowSeconds != 2 {
		t.Errorf("the whole scan: %+v", a)
	}
	if a := averageRates(pipeline.Progress{}); a != (service.Rates{}) {
		t.Errorf("a scan of no time: %+v", a)
	}
}

// TestRunnerStorage: the free space where scans go, and an error that
// says why where it cannot be read.
func TestRunnerStorage(t *testing.T) {
	if st := storage(t.TempDir()); st.FreeBytes <= 0 || st.Error != "" {
		t.Errorf("a temporary directory: %+v", st)
	}
	if st := storage(filepath.Join(t.TempDir(), "absent")); st.FreeBytes != -1 || !strings.Contains(st.Error, "no such file") {
		t.Errorf("an absent directory: %+v", st)
	}
	r := &Runner{ModuleIDs: []int{2, 3}}
	if st := r.Storage(); st.Directory == "" || st.Error != "" {
		t.Errorf("before the first scan: %+v", st)
	}
	root := t.TempDir()
	if st := (&Runner{DataRoot: root}).Storage(); st.Directory != root || st.FreeBytes <= 0 {
		t.Errorf("with a data root: %+v", st)
	}
	if m := r.Modules(); !slices.Equal(m, []int{2, 3}) {
		t.Errorf("modules %v", m)
	}
	if m := (&Runner{}).Modules(); m != nil {
		t.Errorf("modules of a serve of any module: %v", m)
	}
}
