package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"h5ingest/pipeline"
	"h5ingest/scan"
	"h5ingest/source/fabric"
	"h5ingest/stream"
)

// TestPrintResult prints a scan's result with every part a summary can
// have: the summaries go to standard output, in the table a person
// reads, the notes to standard error, a warning marked as one, in the
// order the scan met them.
func TestPrintResult(t *testing.T) {
	res := scan.Result{
		Notes: []scan.Note{{Kind: scan.NeverConnected, Text: "module 2 never connected: its frames are recorded missing"}},
		Modules: []scan.Summary{{
			Module: 0, Path: "/d/s_mod0.h5", Frames: 10,
			Progress: pipeline.Progress{Counts: pipeline.Counts{OK: 8, Missing: 1, CRCMismatch: 1, Discarded: 1, Overflow: 2, OutOfRange: 3},
				Written: 9, Elapsed: 2 * time.Second, Active: 1500 * time.Millisecond, RawBytes: 4e6, ImageBytes: 8e6, StoredBytes: 2e6},
			Live:     &scan.LiveResult{Stats: stream.Stats{Sent: 7, Dropped: 3, NoConsumer: 1, Slow: 2, Thinned: 1}},
			Received: &fabric.Stats{Frames: 12, Bytes: 3456, HeldBack: 1500 * time.Microsecond},
			Stages:   &scan.StageTimes{Decode: 1250 * time.Microsecond, Compress: 500 * time.Microsecond, Write: 20 * time.Microsecond},
			Report:   "/d/report.html",
			Notes: []scan.Note{{Kind: scan.Warning, Text: "no consumer connected: the end of series was not sent"},
				{Kind: scan.Beyond, Text: "3 frames beyond the scan were rejected"}},
		}},
		Master: &scan.MasterResult{Path: "/d/s_master.h5", Modules: 3, Frames: 10, Height: 64, Width: 96,
			Notes: []scan.Note{{Kind: scan.Warning, Text: "module files disagree on the title"}}},
	}
	var out, errs strings.Builder
	printResult(&out, &errs, res)
	wantOut := `/d/s_mod0.h5
  frames          10 in the scan, 9 written
  ok              8
  missing         1
  discarded       1 arrived but not written: the scan was stopped at once, before it could write them (recorded missing)
  crc mismatch    1
  rejected        0
  duplicates      0 dropped
  out of range    3 rejected (beyond the scan, not written)
  pipeline full   2 dropped (recorded missing)
  time            2.00 s, 4.5 frames/s
  pipeline time   1.5 s, 6.0 frames/s, first frame in to last chunk written
  throughput      2 MB/s raw in, 4 MB/s decoded, 1 MB/s stored
  compression     4.00
  stream          7 images sent, 3 dropped (1 no consumer connected, 2 the consumer was slower than the scan: in the file, not the stream), 1 thinned
  stream end      not delivered
  received        12 frames, 3456 bytes; ring full (sender held back) 1.5ms
  stages          decode 1.25 ms/batch, compress 0.50 ms/frame, write 0.02 ms/frame
  report          /d/report.html
/d/s_master.h5
  master          3 modules, 10 frames of 64 x 96
`
	wantErrs := `h5ingest: module 2 never connected: its frames are recorded missing
h5ingest: warning: no consumer connected: the end of series was not sent
h5ingest: 3 frames beyond the scan were rejected
h5ingest: warning: module files disagree on the title
`
	if out.String() != wantOut {
		t.Errorf("standard output:\n%s\nwant:\n%s", out.String(), wantOut)
	}
	if errs.String() != wantErrs {
		t.Errorf("standard error:\n%s\nwant:\n%s", errs.String(), wantErrs)
	}
}

// TestChecksFailed: the failures of pre-scan checks are printed one a
// line and leave scan.ErrChecks, which Run says nothing more of; any
// other error is returned as it is.
func TestChecksFailed(t *testing.T) {
	var b strings.Builder
	err := checksFailed(&b, &scan.ChecksError{Failures: []error{errors.New("output directory /x does not exist"), errors.New("listen address :1 is not free")}})
	if err != scan.ErrChecks {
		t.Errorf("error %v, want scan.ErrChecks itself", err)
	}
	if want := "h5ingest: pre-scan check: output directory /x does not exist\nh5ingest: pre-scan check: listen address :1 is not free\n"; b.String() != want {
		t.Errorf("printed %q, want %q", b.String(), want)
	}
	other := errors.New("disk full")
	if err := checksFailed(&b, other); err != other {
		t.Errorf("error %v, want %v", err, other)
	}
}
