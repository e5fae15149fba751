package cli

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/scan"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

// TestInspectPrintsReport checks the lines inspect prints of its reports,
// those no file of the other tests leads to among them: a SWMR file whose
// filters no codec reads, with no plan and one frame; a master with a
// module file absent; a capture whose plan does not read and that was cut
// short.
func TestInspectPrintsReport(t *testing.T) {
	for _, tt := range []struct {
		name string
		rep  *scan.InspectReport
		want string
	}{
		{"file", &scan.InspectReport{Path: "a.h5", File: &scan.FileSummary{Layout: "cxi", SWMR: true,
			Frames: 1, Height: 2, Width: 3, ElemSize: 2, Filters: []compress.Filter{{ID: 32015, Values: []uint32{3}}},
			StoredBytes: 1500, DecodedBytes: 12, Ratio: 0.008, Counts: frame.Counts{OK: 1}, SpanFrames: 1}},
			"a.h5\n" +
				"  layout        cxi (SWMR file)\n" +
				"  stack         1 x 2 x 3 uint16, 12 B decoded\n" +
				"  compression   no codec of this h5ingest reads it: filter 32015 (filter 32015: 3); 1.5 kB stored, ratio 0.01\n" +
				"  frames        ok 1, missing 0, crc mismatch 0, rejected 0\n"},
		{"file with problems, plan and span", &scan.InspectReport{Path: "b.h5", File: &scan.FileSummary{Layout: "nxtomo",
			Frames: 4, Height: 1, Width: 1, ElemSize: 4, Codec: "none", StoredBytes: 12, DecodedBytes: 16, Ratio: 1,
			Counts: frame.Counts{OK: 3, Missing: 1}, Problems: "missing frame 3", Plan: "4 projections at 0 to 135 degrees",
			Span: 2 * time.Second, SpanFrames: 3}},
			"b.h5\n" +
				"  layout        nxtomo\n" +
				"  stack         4 x 1 x 1 uint32, 16 B decoded\n" +
				"  compression   none: no filter; 12 B stored, ratio 1.00\n" +
				"  frames        ok 3, missing 1, crc mismatch 0, rejected 0\n" +
				"  problems      missing frame 3\n" +
				"  plan          4 projections at 0 to 135 degrees\n" +
				"  time span     2.000 s of detector time, mean 1.0 frames/s\n"},
		{"master", &scan.InspectReport{Path: "m.h5", Master: &scan.MasterSummary{Layout: "nxtomo", Frames: 5, Height: 72, Width: 196, ElemSize: 4,
			Modules: []scan.ModuleSummary{
				{MasterModule: writer.MasterModule{ID: 0, File: "m_m0.h5", Height: 32, Width: 96}, Counts: frame.Counts{OK: 5}},
				{MasterModule: writer.MasterModule{ID: 12, File: "m_m12.h5", X: 100, Y: 40, Height: 32, Width: 96}, Absent: true},
			}}},
			"m.h5\n" +
				"  layout        nxtomo, master of 2 modules\n" +
				"  stack         5 x 72 x 196 uint32 (virtual)\n" +
				"  module 0      at (0, 0), 32x96, m_m0.h5: ok 5, missing 0, crc mismatch 0, rejected 0\n" +
				"  module 12     at (40, 100), 32x96, m_m12.h5: file absent (its frames read as the fill value)\n"},
		{"capture", &scan.InspectReport{Path: "c.pmcap", Capture: &scan.CaptureSummary{
			Metadata: capture.Metadata{Profile: "p"}, PlanErr: errors.New("bad plan"), Size: 2048,
			Err: fmt.Errorf("read capture c.pmcap at byte 9: %w", capture.ErrTruncated)}},
			"c.pmcap\n" +
				"  capture       written by (not recorded) at (not recorded), profile \"p\"\n" +
				"  plan          unreadable: bad plan\n" +
				"  records       0 frames of 0 modules, 2.0 kB\n" +
				"  cut short     read capture c.pmcap at byte 9: " + capture.ErrTruncated.Error() + "\n"},
		{"capture with a plan", &scan.InspectReport{Path: "d.pmcap", Capture: &scan.CaptureSummary{
			Metadata: capture.Metadata{Software: "h5ingest simulate", Created: "2026-01-02T03:04:05Z"}, Plan: &plan.Plan{}, Size: 10,
			Orientation: []int{0, 180, 180, 0}, Err: errors.New("bad record")}},
			"d.pmcap\n" +
				"  capture       written by h5ingest simulate at 2026-01-02T03:04:05Z, profile \"\"\n" +
				"  plan          " + fmt.Sprint(plan.Plan{}) + "\n" +
				"  orientation   2 of 4 chips at 180 degrees: [0 180 180 0]\n" +
				"  records       0 frames of 0 modules, 10 B\n" +
				"  unreadable    bad record\n"},
	} {
		var b bytes.Buffer
		printInspect(&b, tt.rep)
		if b.String() != tt.want {
			t.Errorf("%s: inspect prints\n%s\nwant\n%s", tt.name, b.String(), tt.want)
		}
	}
}

// TestInspectPNGNotes checks what inspect --png says of each note of
// scan.ReadImage.
func TestInspectPNGNotes(t *testing.T) {
	for _, tt := range []struct {
		note scan.ImageNote
		want string
	}{
		{scan.ImageNote{Kind: scan.FrameNotWritten, Path: "a.h5", Frame: 3, Status: frame.StatusRejected},
			"frame 3 of a.h5 is rejected: it was never written, the picture shows the fill value 0"},
		{scan.ImageNote{Kind: scan.FrameDamaged, Path: "a.h5", Frame: 4, Status: frame.StatusCRCMismatch},
			"frame 4 of a.h5 has a payload CRC mismatch: the picture shows it as received, possibly damaged"},
		{scan.ImageNote{Kind: scan.ModuleFileAbsent, Path: "m_m2.h5", Frame: 4, Module: 2},
			"module 2's file m_m2.h5 is absent: its pixels show the fill value 0"},
		{scan.ImageNote{Kind: scan.ModuleFileShort, Path: "m_m2.h5", Frame: 4, Module: 2, Frames: 3},
			"module 2's file m_m2.h5 has frames 0 to 2: its pixels show the fill value 0"},
	} {
		if got := imageNote(tt.note); got != tt.want {
			t.Errorf("%+v reads %q, want %q", tt.note, got, tt.want)
		}
	}
}
