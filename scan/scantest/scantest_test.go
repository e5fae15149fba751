package scantest_test

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/scan/scantest"
	"h5ingest/source/sim"
)

// TestSimulateTruth simulates a scan with faults and checks what the
// helpers read back of it: the truth of the capture, the configuration
// that draws its frames again, the statuses the faults should give, and
// the records as on the wire, which WriteCapture writes back.
func TestSimulateTruth(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Format, cfg.Plan, cfg.Seed = scantest.SmallFormat, plan.Tomo(1, 1, 6, 0, 180), 3
	cfg.Missing.Frames, cfg.Corrupt.Frames = []int{2}, []int{5}
	path, truth := scantest.Simulate(t, cfg)
	if truth.Frames != 8 || truth.Seed != 3 || len(truth.DataCRC) != 8 {
		t.Fatalf("truth: %d frames, seed %d, %d CRCs; want 8, 3, 8", truth.Frames, truth.Seed, len(truth.DataCRC))
	}
	again := scantest.Config(t, truth)
	if again.Format != cfg.Format || again.Seed != cfg.Seed || again.Frames != truth.Frames {
		t.Errorf("Config: format %v seed %d frames %d, want %v %d %d", again.Format, again.Seed, again.Frames, cfg.Format, cfg.Seed, truth.Frames)
	}
	want := make([]uint8, 8)
	want[2], want[5] = frame.StatusMissing, frame.StatusCRCMismatch
	if got := scantest.ExpectedStatus(truth); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ExpectedStatus: %v, want %v", got, want)
	}
	recs := scantest.CaptureRecords(t, path)
	if len(recs) != truth.Records || len(recs) != 7 {
		t.Fatalf("%d records, want the truth's %d (8 frames, one missing)", len(recs), truth.Records)
	}
	copyPath := filepath.Join(t.TempDir(), "copy.pmcap")
	scantest.WriteCapture(t, copyPath, recs)
	if back := scantest.CaptureRecords(t, copyPath); fmt.Sprint(back) != fmt.Sprint(recs) {
		t.Error("the records written back by WriteCapture differ")
	}
}

// TestWriteFrames writes a small file with a frame missing and reads its
// statuses back.
func TestWriteFrames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.h5")
	ok := scantest.WriteFrames(t, path, 5, func(i int) bool { return i == 1 })
	st := scantest.Statuses(t, path)
	if ok != 4 || st[frame.StatusOK] != 4 || st[frame.StatusMissing] != 1 || len(scantest.Records(t, path)) != 5 {
		t.Errorf("%d ok written, statuses %v: want 4 ok and 1 missing of 5", ok, st)
	}
	if n := scantest.OKFrames(path); n != 4 {
		t.Errorf("OKFrames: %d, want 4", n)
	}
	if n := scantest.OKFrames(filepath.Join(t.TempDir(), "none.h5")); n != 0 {
		t.Errorf("OKFrames of no file: %d, want 0", n)
	}
}

// TestFreePorts checks that the n ports FreePorts finds can be listened
// on, one after the other, and that no port is handed out twice.
func TestFreePorts(t *testing.T) {
	base := scantest.FreePorts(t, 3)
	for i := range 3 {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
		if err != nil {
			t.Fatalf("port %d of 3 (%d): %v", i, base+i, err)
		}
		defer l.Close()
	}
	if _, err := net.ResolveTCPAddr("tcp", scantest.FreeAddr(t)); err != nil {
		t.Error(err)
	}
	// No port twice, so that tests in parallel do not meet on one.
	seen := map[int]bool{base: true, base + 1: true, base + 2: true}
	for range 200 {
		p := scantest.FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// TestSummaryCount reads the numbers of a summary's lines.
func TestSummaryCount(t *testing.T) {
	summary := "scan s1\n  received  12 frames\n  ok        10\n  missing   2\n"
	for label, want := range map[string]int{"received": 12, "ok": 10, "missing": 2} {
		if got := scantest.SummaryCount(t, summary, label); got != want {
			t.Errorf("%s: %d, want %d", label, got, want)
		}
	}
}

// TestPythonSkips checks that Python skips a test where a module is
// missing, and not where the modules are there.
func TestPythonSkips(t *testing.T) {
	scantest.Python(t, "json")
	returned := false
	t.Run("missing module", func(t *testing.T) {
		scantest.Python(t, "json", "h5ingest_no_such_module")
		returned = true
	})
	if returned {
		t.Error("Python returned for a module that cannot be imported: want the test skipped")
	}
}
