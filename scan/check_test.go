package scan

import (
	"h5ingest/compress"
	"h5ingest/config"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
	"h5ingest/writer"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestExpectedBytes(t *testing.T) {
	stages := scantest.Stages(t)
	tests := []struct {
		frames, frameBytes int
		compression        string
		want               uint64
	}{
		{100, 1000, "bslz4", 55000},
		{100, 1000, "none", 110000},
		{0, 1000, "bslz4", 0},
		{2040, 1536 * 1536 * 4, "bslz4", 2040 * 1536 * 1536 * 2 * 11 / 10},
	}
	for _, tt := range tests {
		p := config.Default()
		p.Output.Compression = tt.compression
		c := Checks{Profile: p, Stages: stages}
		if got := expectedBytes(tt.frames, tt.frameBytes, c.compressed()); got != tt.want {
			t.Errorf("expectedBytes(%d, %d, %s) = %d, want %d", tt.frames, tt.frameBytes, tt.compression, got, tt.want)
		}
	}
}

// TestReadersWarning checks that the warning about a codec's readers is
// the one its registry entry carries, a facility's codec's too.
func TestReadersWarning(t *testing.T) {
	stages := scantest.Stages(t)
	if err := stages.AddCodec(registry.Codec{Name: "zstd-old-readers", Warning: "old readers fail",
		New: func(elemSize, _ int) (compress.Codec, error) { return compress.New("lz4", elemSize, 0) }}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ codec, want string }{
		{"bszstd", "bszstd (bitshuffle + zstd) files cannot be read with bitshuffle older than 0.4"},
		{"bslz4", ""},
		{"zstd-old-readers", "old readers fail"},
	} {
		got := ReadersWarning(stages, tc.codec)
		if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: warning %q, want %q", tc.codec, got, tc.want)
		}
		// The pre-scan checks give it as a warning, before any failure.
		p := config.Default()
		p.Output.Compression = tc.codec
		var notes []Note
		(Checks{Profile: p, Stages: stages}).Run(func(n Note) { notes = append(notes, n) })
		if said := slices.ContainsFunc(notes, func(n Note) bool { return n.Kind == Warning && n.Text == got }); said != (got != "") {
			t.Errorf("%s: the pre-scan checks' notes %q; want the readers' warning: %v", tc.codec, notes, got != "")
		}
	}
}

func TestPreScanChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, "left.h5") // a scan to it was interrupted
	if err := os.WriteFile(writer.TempName(left), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	stages := scantest.Stages(t)
	cpu, cuda := config.Default(), config.Default()
	cpu.Backend, cuda.Backend = "cpu", "cuda"
	tests := []struct {
		name  string
		check func() error
		want  string // "" for no error
	}{
		{"space", func() error { return checkFreeSpace(dir, 1) }, ""},
		{"too little space", func() error { return checkFreeSpace(dir, 1<<62) }, "free space on " + dir},
		{"no such file system", func() error { return checkFreeSpace(filepath.Join(dir, "none"), 1) }, "no such file"},
		{"writable", func() error { return checkWritable(dir) }, ""},
		{"no directory", func() error { return checkWritable(filepath.Join(dir, "none")) }, "does not exist"},
		{"a file", func() error { return checkWritable(file) }, "is not a directory"},
		{"new file", func() error { return checkNew(filepath.Join(dir, "new.h5"), false) }, ""},
		{"file exists", func() error { return checkNew(file, false) }, "output file " + file + " exists (give --overwrite to replace it)"},
		{"unfinished scan's file", func() error { return checkNew(left, false) }, writer.TempName(left) + " exists: the temporary file of a scan to " + left},
		{"port free", func() error { return checkPortFree("tcp", scantest.FreeAddr(t)) }, ""},
		{"port busy", func() error { return checkPortFree("tcp", busy.Addr().String()) }, "is not free"},
		{"verbs port not checked", func() error { return checkPortFree("verbs", busy.Addr().String()) }, ""},
		{"cpu backend", func() error { return checkBackend(stages, cpu) }, ""},
		{"cuda backend", func() error { return checkBackend(stages, cuda) }, "decode backend cuda"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check()
			if tt.name == "cuda backend" && err == nil {
				t.Skip("this machine has a CUDA device")
			}
			if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the writable check left %d files in %s", len(entries)-2, dir)
	}
}

func TestNewFiles(t *testing.T) {
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	array := config.Default()
	array.Detector.Modules = []config.Module{{ID: 0}, {ID: 1, X: 1536}}
	array.Output.Directory = "/data"
	tests := []struct {
		name         string
		output, scan string
		template     string
		profile      config.Profile
		master       string
		modules      []string
	}{
		{"one module -o", "/d/s.h5", "", "{scan}.h5", config.Default(), "", []string{"/d/s.h5"}},
		{"-o", "/d/s.h5", "", "{scan}_m{module}.h5", array, "/d/s.h5", []string{"/d/s_m0.h5", "/d/s_m1.h5"}},
		{"template", "", "x", "{scan}_{date}_m{module}.h5", array, "/data/x_20261122_master.h5",
			[]string{"/data/x_20261122_m0.h5", "/data/x_20261122_m1.h5"}},
		{"template, module first", "", "x", "m{module}_{scan}.h5", array, "/data/master_x.h5",
			[]string{"/data/m0_x.h5", "/data/m1_x.h5"}},
		{"template without {module}", "", "x", "{scan}.h5", array, "/data/x.h5", []string{"/data/x_m0.h5", "/data/x_m1.h5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.profile
			p.Output.Template = tt.template
			files, err := NewFiles(p, Names{Output: tt.output, ScanID: tt.scan, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range files.Modules {
				got = append(got, m.Path)
			}
			if files.Master != tt.master || !slices.Equal(got, tt.modules) {
				t.Errorf("master %q modules %v, want %q %v", files.Master, got, tt.master, tt.modules)
			}
		})
	}
	if _, err := NewFiles(array, Names{Now: now}); err == nil {
		t.Error("no -o and no --scan-id: no error")
	}
	files, _ := NewFiles(array, Names{Output: "/d/s.h5", Now: now})
	if one, err := files.Only(1); err != nil || one.Master != "" || len(one.Modules) != 1 || one.Modules[0].Path != "/d/s_m1.h5" {
		t.Errorf("only(1) = %+v, %v", one, err)
	}
	if _, err := files.Only(5); err == nil || !strings.Contains(err.Error(), "modules 0, 1") {
		t.Errorf("only(5): %v, want an error listing the modules", err)
	}
}

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9100": "127.0.0.1:9100", "9100": "127.0.0.1:9100", "0.0.0.0:9100": "0.0.0.0:9100",
		"127.0.0.1:0": "127.0.0.1:0", "[::1]:9100": "[::1]:9100",
	} {
		if got, err := listenAddr(in); err != nil || got != want {
			t.Errorf("listenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "host", "a:b:c"} {
		if _, err := listenAddr(bad); err == nil {
			t.Errorf("listenAddr(%q) accepted", bad)
		}
	}
}
