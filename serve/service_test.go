package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"h5ingest/pipeline"
	"h5ingest/scan"
	"h5ingest/scan/scantest"
	"h5ingest/service"

	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"
)

// TestRunnerOutputDir: a request's output directory lies under the data
// root, links resolved, whichever way it is written; one that leaves it,
// lexically or through a link, is refused, and nothing is created outside
// it; a missing one is created only where the operator allows; without a
// data root no request chooses a directory.
func TestRunnerOutputDir(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "data"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "p42"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{"out": outside, "in": filepath.Join(root, "p42"), "up": ".."} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The data root itself through a link: what a request names resolves
	// under the real one.
	rootLink := filepath.Join(base, "root-link")
	if err := os.Symlink(root, rootLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dataRoot, dir string
		create        bool
		want, err     string // want: relative to root
	}{
		{root, ".", false, ".", ""},
		{root, "p42", false, "p42", ""},
		{root, root + "/p42", false, "p42", ""},
		{root, "in", false, "p42", ""},
		{rootLink, "p42", false, "p42", ""},
		{rootLink, rootLink + "/p42", false, "p42", ""},
		{root, "p42/../p42", false, "p42", ""},
		{root, "new/sub", true, "new/sub", ""},
		{root, "in/made", true, "p42/made", ""},
		{root, "new2", false, "", "this serve creates no directory"},
		{root, "..", false, "", "not under the data root"},
		{root, "../outside", false, "", "not under the data root"},
		{root, outside, false, "", "not under the data root"},
		{root, "/", false, "", "not under the data root"},
		{root, "out", false, "", "leads out of the data root"},
		{root, "out/x", true, "", "leads out of the data root"},
		{root, "up/outside", false, "", "leads out of the data root"},
		{root, "file", false, "", "not a directory"},
		{"", "p42", false, "", "no output directory from a request"},
	} {
		r := &Runner{DataRoot: tc.dataRoot, CreateDirs: tc.create}
		got, err := r.outputDir(tc.dir)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s under %s: %q, %v; want an error saying %q", tc.dir, tc.dataRoot, got, err, tc.err)
		case tc.err == "" && (err != nil || got != filepath.Join(root, tc.want)):
			t.Errorf("%s under %s: %q, %v; want %s", tc.dir, tc.dataRoot, got, err, filepath.Join(root, tc.want))
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("directories made outside the data root: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(root, "new2")); err == nil {
		t.Error("a directory was made without CreateDirs")
	}
}

// TestRunnerPrepareNamesStayInTheDirectory: whatever decoded the request,
// Prepare refuses a scan_id or output that is not one path element,
// naming the request field, not the command's flags, and makes nothing
// outside the data root.
func TestRunnerPrepareNamesStayInTheDirectory(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runner{DataRoot: root, Log: zap.NewNop(), Stages: scantest.Stages(t)}
	dot := "."
	for _, tc := range []struct {
		name, scanID, output, says string
	}{
		{"output up and out", "v1", "../outside/pwn.h5", "output"},
		{"output absolute", "v2", outside + "/pwn.h5", "output"},
		{"output dot-dot", "v3", "..", "output"},
		{"output with a backslash", "v4", `..\pwn.h5`, "output"},
		{"scan_id up and out", "../outside/x", "", "scan_id"},
		{"scan_id dot-dot", "..", "", "scan_id"},
	} {
		req := service.ArmRequest{Profile: "default", ScanID: tc.scanID, Output: tc.output, Plan: &service.Plan{Projections: 3},
			Overrides: &service.Overrides{Output: &service.OutputOverrides{Directory: &dot}}}
		sc, err := r.Prepare(context.Background(), req)
		if err == nil {
			sc.Release()
			t.Errorf("%s: prepared", tc.name)
			continue
		}
		var refused *service.RefusedError
		if !errors.As(err, &refused) || len(refused.Reasons) != 1 || !strings.HasPrefix(refused.Reasons[0], tc.says+" ") && !strings.HasPrefix(refused.Reasons[0], tc.says+":") {
			t.Errorf("%s: %v, want a refusal naming %s", tc.name, err, tc.says)
		}
		if strings.Contains(err.Error(), "--") {
			t.Errorf("%s: the refusal names a command-line flag: %v", tc.name, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the directory outside the data root holds %v", entries)
	}
}

// TestRunnerPrepareRefusesOverflowingAngles: angles that are each finite
// but whose rotation between them is not (it would record NaN and
// infinite angles in the file) are refused at arm, naming the request
// field.
func TestRunnerPrepareRefusesOverflowingAngles(t *testing.T) {
	r := &Runner{DataRoot: t.TempDir(), Log: zap.NewNop(), Stages: scantest.Stages(t)}
	dot, lo, hi := ".", -1.7e308, 1.7e308
	req := service.ArmRequest{Profile: "default", ScanID: "angles",
		Plan:      &service.Plan{Projections: 3, AngleStart: &lo, AngleEnd: &hi},
		Overrides: &service.Overrides{Output: &service.OutputOverrides{Directory: &dot}}}
	sc, err := r.Prepare(context.Background(), req)
	if err == nil {
		sc.Release()
		t.Fatal("prepared a scan of angles -1.7e308 to 1.7e308")
	}
	var refused *service.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "request plan.angle_start") || !strings.Contains(err.Error(), "plan.angle_end") {
		t.Errorf("%v, want a refusal naming plan.angle_start and plan.angle_end", err)
	}
}

// TestRunnerPrepareTakesTheRequestsAngles: angles a request gives, 0 and
// 0 included, are the scan's; angles it leaves out are the profile's.
func TestRunnerPrepareTakesTheRequestsAngles(t *testing.T) {
	zero, ninety := 0.0, 90.0
	for _, tc := range []struct {
		name       string
		start, end *float64
		want       [2]float64
	}{
		{"0 and 0", &zero, &zero, [2]float64{0, 0}},
		{"the end alone", nil, &ninety, [2]float64{0, 90}},
		{"none", nil, nil, [2]float64{0, 180}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runner{DataRoot: t.TempDir(), Log: zap.NewNop(), Stages: scantest.Stages(t)}
			dot := "."
			req := service.ArmRequest{Profile: "default", ScanID: "angles",
				Plan:      &service.Plan{Projections: 3, AngleStart: tc.start, AngleEnd: tc.end},
				Overrides: &service.Overrides{Output: &service.OutputOverrides{Directory: &dot}}}
			sc, err := r.Prepare(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Release()
			pl := sc.(*serveScan).plan
			if got := [2]float64{pl.AngleStart, pl.AngleEnd}; got != tc.want {
				t.Errorf("angles %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLogNotes: the service logs every note of a scan's result at
// warning level, with its kind, and the module or master it is about.
func TestLogNotes(t *testing.T) {
	core, logs := zapobserver.New(zap.InfoLevel)
	logNotes(zap.New(core), scan.Result{
		Notes:   []scan.Note{{Kind: scan.NeverConnected, Text: "module 3 never connected: its frames are recorded missing"}},
		Modules: []scan.Summary{{Module: 1, Notes: []scan.Note{{Kind: scan.Beyond, Text: "4 frames beyond the scan were rejected"}}}, {Module: 2}},
		Master:  &scan.MasterResult{Path: "m.h5", Notes: []scan.Note{{Kind: scan.Short, Text: "module 1 has 8 of the scan's 12 frames"}}},
	})
	var got []string
	for _, e := range logs.All() {
		f := e.ContextMap()
		if e.Level != zap.WarnLevel || e.Message != "scan note" {
			t.Errorf("logged %s %q, want a warning %q", e.Level, e.Message, "scan note")
		}
		got = append(got, fmt.Sprintf("%v|%v|%v|%v", f["kind"], f["module"], f["master"], f["note"]))
	}
	want := []string{
		"never connected|<nil>|<nil>|module 3 never connected: its frames are recorded missing",
		"beyond the scan|1|<nil>|4 frames beyond the scan were rejected",
		"short|<nil>|m.h5|module 1 has 8 of the scan's 12 frames",
	}
	if !slices.Equal(got, want) {
		t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestServiceNotes: the service shows every note of a scan's result, in
// the result's order, each with its kind and the module it is about.
func TestServiceNotes(t *testing.T) {
	got := serviceNotes(scan.Result{
		Notes:   []scan.Note{{Kind: scan.NeverConnected, Text: "module 3 never connected: its frames are recorded missing"}},
		Modules: []scan.Summary{{Module: 1, Notes: []scan.Note{{Kind: scan.Beyond, Text: "4 frames beyond the scan were rejected"}}}, {Module: 2, Notes: []scan.Note{{Kind: scan.Warning, Text: "the stream did not end"}}}},
		Master:  &scan.MasterResult{Path: "m.h5", Notes: []scan.Note{{Kind: scan.Short, Text: "module 1 has 8 of the scan's 12 frames"}}},
	})
	var lines []string
	for _, n := range got {
		module := "-"
		if n.Module != nil {
			module = strconv.Itoa(*n.Module)
		}
		lines = append(lines, n.Kind+"|"+module+"|"+n.Text)
	}
	want := []string{
		"never connected|-|module 3 never connected: its frames are recorded missing",
		"beyond the scan|1|4 frames beyond the scan were rejected",
		"warning|2|the stream did not end",
		"short|-|module 1 has 8 of the scan's 12 frames",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("notes\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if serviceNotes(scan.Result{Modules: []scan.Summary{{Module: 0}}}) != nil {
		t.Error("a result without notes gives notes")
	}
}

// TestRunnerLogsReadersWarning: a scan armed with a codec whose files old
// readers cannot read logs the warning a command prints before its scan.
func TestRunnerLogsReadersWarning(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	core, logs := zapobserver.New(zap.WarnLevel)
	dir := t.TempDir()
	r := &Runner{Profiles: profileFiles(t, "zstd", serveProfile(scantest.BigFormat, addr, dir, 16, "bszstd", 1)), Log: zap.New(core), Stages: scantest.Stages(t)}
	sc, err := r.Prepare(context.Background(), service.ArmRequest{Profile: "zstd", ScanID: "w", Plan: &service.Plan{Projections: 3}})
	if err != nil {
		t.Fatal(err)
	}
	sc.Release()
	warned := logs.FilterMessage("scan note").FilterField(zap.Stringer("kind", scan.Warning)).All()
	if len(warned) != 1 || !strings.Contains(warned[0].ContextMap()["note"].(string), "bitshuffle older than 0.4") {
		t.Errorf("logged %v, want the bszstd readers' warning", logs.All())
	}
}

// TestRunnerPrepareChecksProcessorOptions: an arm request whose profile
// sets a processor option the processor's check refuses (flatfield's
// bin: 0) is refused before any scan is armed, naming the entry and the
// option, as "h5ingest profiles check" refuses the profile.
func TestRunnerPrepareChecksProcessorOptions(t *testing.T) {
	profiles := profileFiles(t, "ff.yaml", "name: ff\noutput:\n  processors: [{name: flatfield, bin: 0}]\n")
	r := &Runner{DataRoot: t.TempDir(), Profiles: profiles, Log: zap.NewNop(), Stages: scantest.Stages(t)}
	dot := "."
	req := service.ArmRequest{Profile: "ff", ScanID: "ff", Plan: &service.Plan{Darks: 1, Flats: 1, Projections: 3},
		Overrides: &service.Overrides{Output: &service.OutputOverrides{Directory: &dot}}}
	sc, err := r.Prepare(context.Background(), req)
	if err == nil {
		sc.Release()
		t.Fatal("prepared a scan whose flatfield bins by 0")
	}
	var refused *service.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "key output.processors[0]: processor flatfield: bin: 0, want 1 or more") {
		t.Errorf("%v, want a refusal naming output.processors[0] and bin: 0", err)
	}
}

// TestRunnerPrepareProfileDirectoryUnderDataRoot: with a data root, a
// request that names no directory writes where its profile's relative
// directory (every built-in profile's is ".") lies under the data root,
// not in serve's working directory; a request that names one writes
// there.
func TestRunnerPrepareProfileDirectoryUnderDataRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "p42"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runner{DataRoot: root, Log: zap.NewNop(), Stages: scantest.Stages(t)}
	sub := "p42"
	for _, tc := range []struct {
		name      string
		overrides *service.Overrides
		want      string
	}{
		{"no directory", nil, filepath.Join(root, "nodir.h5")},
		{"a directory", &service.Overrides{Output: &service.OutputOverrides{Directory: &sub}}, filepath.Join(root, "p42", "adir.h5")},
	} {
		id := strings.TrimSuffix(filepath.Base(tc.want), ".h5")
		sc, err := r.Prepare(context.Background(), service.ArmRequest{Profile: "default", ScanID: id,
			Plan: &service.Plan{Projections: 3}, Overrides: tc.overrides})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := sc.(*serveScan).files.Modules[0].Path
		sc.Release()
		if got != tc.want {
			t.Errorf("%s: the scan writes %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestServiceCountsAddUpToThePlan: the service counts rejected as the
// file records it, so that ok, crc_mismatch, rejected and missing add up
// to the plan, and rejected is what /metrics' rejected problem says;
// frames beyond the plan are dropped, with the duplicates.
func TestServiceCountsAddUpToThePlan(t *testing.T) {
	p := pipeline.Progress{Counts: pipeline.Counts{Planned: 20, Received: 26, OK: 14, CRCMismatch: 1, Rejected: 2,
		Missing: 3, Duplicate: 2, OutOfRange: 4}}
	c := serviceCounts(p)
	if sum := c.OK + c.CRCMismatch + c.Rejected + c.Missing; sum != c.Planned {
		t.Errorf("ok %d + crc_mismatch %d + rejected %d + missing %d = %d, want the plan's %d", c.OK, c.CRCMismatch, c.Rejected, c.Missing, sum, c.Planned)
	}
	if c.Rejected != p.Rejected || c.Dropped != p.Duplicate+p.OutOfRange {
		t.Errorf("rejected %d, dropped %d; want %d (as /metrics and the file say) and %d (duplicates and frames beyond the plan)", c.Rejected, c.Dropped, p.Rejected, p.Duplicate+p.OutOfRange)
	}
}
