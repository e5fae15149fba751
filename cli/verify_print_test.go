package cli

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"h5ingest/frame"
	"h5ingest/scan"
)

// TestVerifyPrintsReport checks the lines verify and recover print of
// their reports, those no file of the other tests leads to among them: a
// bad chunk and the layout's finding, frames with a chunk but no record,
// a file with no frame, a master with a module file that could not be
// verified.
func TestVerifyPrintsReport(t *testing.T) {
	file := &scan.VerifyReport{Path: "a.h5", Frames: 5, Checked: 3, Counts: frame.Counts{OK: 3, Missing: 2},
		Bad:        []scan.Finding{{Frame: -1, Detail: "layout nxtomo: /entry/data/data is missing"}, {Frame: 2, Detail: "data CRC 00000001, recorded 00000002"}},
		Unrecorded: []int{3, 4}}
	empty := &scan.VerifyReport{Path: "b.h5"}
	for _, tt := range []struct {
		name string
		rep  *scan.VerifyReport
		want string
	}{
		{"file", file, "BAD layout nxtomo: /entry/data/data is missing\n" +
			"BAD frame 2: data CRC 00000001, recorded 00000002\n" +
			"note: 2 frames (first 3) have a chunk but no record, as a writer stopped mid-scan leaves them: counted as missing\n" +
			"a.h5: 5 frames, 3 chunks verified; ok 3, missing 2, crc mismatch 0, rejected 0\n"},
		{"no frame", empty, "b.h5: 0 frames, 0 chunks verified; ok 0, missing 0, crc mismatch 0, rejected 0\nb.h5 holds no frame\n"},
		{"master", &scan.VerifyReport{Path: "m.h5", Modules: []scan.ModuleVerify{
			{ID: 0, Path: "b.h5", Report: empty, Err: scan.ErrIncomplete},
			{ID: 3, Path: "c.h5", Err: fmt.Errorf("stat c.h5: %w", os.ErrNotExist)},
		}}, "b.h5: 0 frames, 0 chunks verified; ok 0, missing 0, crc mismatch 0, rejected 0\nb.h5 holds no frame\n" +
			"BAD module 3: stat c.h5: file does not exist\n" +
			"m.h5: master of 2 modules\n"},
	} {
		var b bytes.Buffer
		printVerify(&b, tt.rep)
		if b.String() != tt.want {
			t.Errorf("%s: verify prints\n%s\nwant\n%s", tt.name, b.String(), tt.want)
		}
	}
	var b bytes.Buffer
	printRecover(&b, &scan.RecoverReport{Temp: "/data/.b.h5.part", Final: "/data/b.h5", Verify: empty})
	if want := "recovered .b.h5.part as /data/b.h5\n" + "b.h5: 0 frames, 0 chunks verified; ok 0, missing 0, crc mismatch 0, rejected 0\nb.h5 holds no frame\n"; b.String() != want {
		t.Errorf("recover prints\n%s\nwant\n%s", b.String(), want)
	}
}
