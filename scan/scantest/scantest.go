// Package scantest provides helpers for end-to-end tests of scans, in
// the manner of net/http/httptest: simulate a capture and read its
// ground truth, send it as a detector module does, register h5ingest's
// own stages, find free loopback ports, look up the Python readers the
// cross-checks need, and read back a scan's file to check it against
// the truth. The tests of scan, serve and the command share them.
//
// Each function takes the test's testing.TB, fails the test when what it
// sets up fails, and skips it where the machine lacks what it needs (the
// Python modules of a cross-check). The package imports none of
// h5ingest's scan or command packages, so that the tests of package scan
// can use it as well as those of the command.
package scantest

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"h5ingest/frame"
	"h5ingest/source/capture"
	"h5ingest/source/sim"
)

// SmallFormat is the frame of most end-to-end tests: 3 x 2 chips of
// 32 x 16 pixels, 24-bit LFSR bitplane; small enough to be quick, with
// several chips in both directions so that orientation matters. It is
// the frame of `h5ingest simulate --chips 3x2 --chip-size 32x16`.
var SmallFormat = frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
	Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}

// Simulate writes the capture the simulator makes of cfg into a file of
// the test's temporary directory, and returns its path and the ground
// truth the capture records.
func Simulate(t testing.TB, cfg sim.Config) (path string, truth *sim.Truth) {
	t.Helper()
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "scan.pmcap")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.WriteCapture(out, capture.Metadata{Profile: "test"})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return path, Truth(t, path)
}

// Truth returns the ground truth the simulated capture at path records.
func Truth(t testing.TB, path string) *sim.Truth {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	truth, err := sim.ReadTruth(r.Metadata())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return truth
}

// Config returns the simulator's configuration that made the capture
// whose truth is given, so that a test can have the simulator draw its
// frames again (sim.Simulator.Image).
func Config(t testing.TB, truth *sim.Truth) sim.Config {
	t.Helper()
	f, err := truth.Format.Format()
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Scene, cfg.Seed, cfg.Format = truth.Scene, truth.Seed, f
	cfg.StartNS, cfg.Orientation, cfg.Module, cfg.FPS = truth.StartNS, truth.Orientation, truth.Module, truth.FPS
	if truth.Plan != nil {
		cfg.Plan = *truth.Plan
	}
	cfg.Frames = truth.Frames
	return cfg
}

// ExpectedStatus returns the status each frame of a scan of the capture
// whose truth is given should be recorded with: missing where the
// simulator left a frame out, a CRC mismatch where it corrupted one, ok
// elsewhere.
func ExpectedStatus(truth *sim.Truth) []uint8 {
	status := make([]uint8, truth.Frames)
	for _, n := range truth.Faults.Missing {
		status[n] = frame.StatusMissing
	}
	for _, n := range truth.Faults.Corrupt {
		status[n] = frame.StatusCRCMismatch
	}
	return status
}

// CaptureRecords returns the records of the capture at path, frames of
// up to 4 MiB, each its header and payload as on the wire.
func CaptureRecords(t testing.TB, path string) [][]byte {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var recs [][]byte
	buf := make([]byte, 4<<20)
	for {
		h, payload, err := r.Next(buf[frame.HeaderSize:])
		if errors.Is(err, io.EOF) {
			return recs
		}
		if err != nil {
			t.Fatal(err)
		}
		rec := make([]byte, frame.HeaderSize+len(payload))
		h.Put(rec)
		copy(rec[frame.HeaderSize:], payload)
		recs = append(recs, rec)
	}
}

// WriteCapture writes a capture of the given records (headers and
// payloads as on the wire) to path, with metadata that holds no plan and
// no truth: a capture of a scan of unknown length.
func WriteCapture(t testing.TB, path string, recs [][]byte) {
	t.Helper()
	WriteCaptureMeta(t, path, capture.Metadata{Profile: "test", Created: "2026-01-01T00:00:00Z", Software: "scantest"}, recs)
}

// WriteCaptureMeta writes a capture of the given records with the
// metadata meta to path.
func WriteCaptureMeta(t testing.TB, path string, meta capture.Metadata, recs [][]byte) {
	t.Helper()
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	w, err := capture.NewWriter(file, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if err := w.WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
