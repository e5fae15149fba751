package scan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/scan/scantest"
	"h5ingest/source/sim"
)

// The scan's tests read what a scan said as a person reads it: notesText
// renders the notes of a Result, and notesTo those said while it runs, in
// the lines of the command (package cli, whose TestPrintResult holds its
// whole text).

// noteLine returns a note as the command prints it.
func noteLine(n Note) string {
	if n.Kind == Warning {
		return "h5ingest: warning: " + n.Text + "\n"
	}
	return "h5ingest: " + n.Text + "\n"
}

// notesTo returns a Notify that writes each note to w as a line.
func notesTo(w io.Writer) func(Note) {
	return func(n Note) { io.WriteString(w, noteLine(n)) }
}

// notesText returns the notes of a scan's result, and the failures of
// its pre-scan checks in err, as the command prints them, in its order.
func notesText(res Result, err error) string {
	var b strings.Builder
	var failed *ChecksError
	if errors.As(err, &failed) {
		for _, f := range failed.Failures {
			fmt.Fprintf(&b, "h5ingest: pre-scan check: %v\n", f)
		}
	}
	for _, n := range res.Notes {
		b.WriteString(noteLine(n))
	}
	for _, m := range res.Modules {
		for _, n := range m.Notes {
			b.WriteString(noteLine(n))
		}
	}
	if m := res.Master; m != nil {
		for _, n := range m.Notes {
			b.WriteString(noteLine(n))
		}
	}
	return b.String()
}

// TestReplayResult replays a capture with faults and checks what Replay
// returns against the file: the summary's counts are the file's records,
// the frames beyond the plan are a note of their own, and a replay given
// no plan says, as it starts, that it takes the capture's; one given a
// plan unlike the capture's warns of it.
func TestReplayResult(t *testing.T) {
	cfg := simScan(scantest.SmallFormat, 12)
	cfg.Missing, cfg.Corrupt = sim.FaultSpec{Frames: []int{3}}, sim.FaultSpec{Frames: []int{5}}
	capture, _ := scantest.Simulate(t, cfg)
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	for _, tc := range []struct {
		name        string
		plan        plan.Plan
		frames      int
		err         error
		kinds       []NoteKind // of the module's notes
		said        []NoteKind // told as the replay ran
		ok, missing int
	}{
		{"plan of 8", plan.Tomo(0, 0, 8, 0, 180), 8, ErrIncomplete, []NoteKind{Beyond}, []NoteKind{Warning}, 6, 1},
		{"no plan", plan.Plan{}, 12, ErrIncomplete, nil, []NoteKind{Info}, 10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "scan.h5")
			files, err := NewFiles(p, Names{Output: out})
			if err != nil {
				t.Fatal(err)
			}
			var said []Note
			res, err := Replay(context.Background(), ReplayOptions{
				Options: Options{Profile: p, Plan: tc.plan, Stages: stages, Notify: func(n Note) { said = append(said, n) }},
				Files:   files, Captures: []string{capture}})
			if !errors.Is(err, tc.err) {
				t.Fatalf("replay: %v, want %v", err, tc.err)
			}
			if len(res.Modules) != 1 || res.Master != nil || len(res.Notes) != 0 {
				t.Fatalf("result %+v, want one module's summary, no master, no note of the scan", res)
			}
			s := res.Modules[0]
			got := scantest.Statuses(t, out)
			if s.Module != 0 || s.Path != out || s.Frames != tc.frames || s.Live != nil || s.Received != nil || s.Stages != nil {
				t.Errorf("summary of module %d, %s, %d frames (%v %v %v); want module 0, %s, %d frames, no stream, connection or stage times",
					s.Module, s.Path, s.Frames, s.Live, s.Received, s.Stages, out, tc.frames)
			}
			pr := s.Progress
			if pr.OK != tc.ok || pr.Missing != tc.missing || pr.CRCMismatch != 1 || pr.OK != got[frame.StatusOK] ||
				pr.Missing != got[frame.StatusMissing] || pr.CRCMismatch != got[frame.StatusCRCMismatch] || pr.OutOfRange != 12-tc.frames {
				t.Errorf("summary: %d ok, %d missing, %d crc mismatch, %d out of range; the file records %v; want %d ok, %d missing, 1 crc mismatch, %d out of range",
					pr.OK, pr.Missing, pr.CRCMismatch, pr.OutOfRange, got, tc.ok, tc.missing, 12-tc.frames)
			}
			if k := kinds(s.Notes); !slices.Equal(k, tc.kinds) {
				t.Errorf("the module's notes %q, want kinds %v", s.Notes, tc.kinds)
			}
			if tc.kinds != nil && !strings.HasPrefix(s.Notes[0].Text, "4 frames beyond the scan were rejected (frame numbers 8 and above, past the plan's 8 frames)") {
				t.Errorf("note %q", s.Notes[0].Text)
			}
			if k := kinds(said); !slices.Equal(k, tc.said) {
				t.Errorf("told %q as it ran, want kinds %v", said, tc.said)
			}
			want := "no plan given: using the plan recorded in " + capture + ": 12 projections over 0..180 degrees"
			if tc.plan.Frames() > 0 {
				want = "capture " + capture + " records the plan 12 projections over 0..180 degrees; the replay writes the plan given, 8 projections over 0..180 degrees"
			}
			if tc.said != nil && said[0].Text != want {
				t.Errorf("told %q, want %q", said[0].Text, want)
			}
		})
	}
}

// TestReplayResultModules replays a scan of four modules from captures of
// three, and a capture of a module the profile does not list: the result
// names the dropped frames, gives each module's summary in the files'
// order, the absent module's with every frame missing, and the master's.
func TestReplayResultModules(t *testing.T) {
	stages := scantest.Stages(t)
	p := profileText(t, stages, arrayProfile, nil)
	format, err := p.Detector.Format()
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	caps := []string{scantest.SimulateModule(t, format, n, 0), scantest.SimulateModule(t, format, n, 1), scantest.SimulateModule(t, format, n, 3), scantest.SimulateModule(t, format, n, 7)}
	files, err := NewFiles(p, Names{Output: filepath.Join(t.TempDir(), "array.h5")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Replay(context.Background(), ReplayOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, n, 0, 180), Stages: stages},
		Files: files, Captures: caps})
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("replay: %v, want ErrIncomplete (module 2 is missing)", err)
	}
	if k := kinds(res.Notes); !slices.Equal(k, []NoteKind{Dropped}) || !strings.HasPrefix(res.Notes[0].Text, "4 frames of modules the profile does not list") {
		t.Errorf("the scan's notes %q, want one of the 4 dropped frames", res.Notes)
	}
	if len(res.Modules) != 4 {
		t.Fatalf("%d summaries, want 4", len(res.Modules))
	}
	for i, s := range res.Modules {
		ok := n
		if i == 2 {
			ok = 0
		}
		if s.Module != files.Modules[i].Module.ID || s.Path != files.Modules[i].Path || s.Progress.OK != ok || s.Progress.Missing != n-ok || s.Frames != n {
			t.Errorf("summary %d: module %d, %s, %d ok, %d missing of %d; want module %d, %s, %d ok", i, s.Module, s.Path,
				s.Progress.OK, s.Progress.Missing, s.Frames, files.Modules[i].Module.ID, files.Modules[i].Path, ok)
		}
	}
	h, w := ArraySize(p, format)
	if m := res.Master; m == nil || m.Path != files.Master || m.Modules != 4 || m.Frames != n || m.Height != h || m.Width != w || len(m.Notes) != 0 {
		t.Errorf("master %+v, want %s of 4 modules, %d frames of %d x %d, no note", m, files.Master, n, h, w)
	}
}

// kinds returns the kinds of notes, nil for none.
func kinds(notes []Note) []NoteKind {
	var k []NoteKind
	for _, n := range notes {
		k = append(k, n.Kind)
	}
	return k
}
