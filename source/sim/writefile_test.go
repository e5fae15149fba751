package sim

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"h5ingest/source/capture"
)

// TestWriteFile writes captures of one module and of three, refuses to
// replace a file unless told to, and leaves nothing of a capture that
// could not be written.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	c := smallConfig(Tomo)
	for _, tc := range []struct {
		name string
		ids  []uint16
	}{{"one.pmcap", []uint16{4}}, {"three.pmcap", []uint16{0, 2, 1}}} {
		path := filepath.Join(dir, tc.name)
		st, err := WriteFile(path, c, tc.ids, false, "test")
		if err != nil {
			t.Fatalf("%v: %v", tc.ids, err)
		}
		r, err := capture.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		tally, err := r.Tally()
		r.Close()
		want := slices.Sorted(slices.Values(tc.ids))
		if err != nil || !slices.Equal(tally.IDs(), want) || tally.Records != st.Records || st.Frames != len(tc.ids)*c.NumFrames() {
			t.Errorf("%v: capture of modules %v, %d records, %v; stats %+v", tc.ids, tally.IDs(), tally.Records, err, st)
		}
		if _, err := WriteFile(path, c, tc.ids, false, "test"); !errors.Is(err, os.ErrExist) {
			t.Errorf("%v again: %v, want os.ErrExist", tc.ids, err)
		}
		if _, err := WriteFile(path, c, tc.ids, true, "test"); err != nil {
			t.Errorf("%v again with overwrite: %v", tc.ids, err)
		}
	}
	if _, err := WriteFile(filepath.Join(dir, "absent", "x.pmcap"), c, []uint16{0}, false, "test"); err == nil {
		t.Error("a capture in a missing directory was written")
	}
	bad := c
	bad.FPS = 0
	path := filepath.Join(dir, "bad.pmcap")
	if _, err := WriteFile(path, bad, []uint16{0}, false, "test"); err == nil {
		t.Error("a configuration that does not validate was written")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed simulation left %s behind: %v", path, err)
	}
}

// TestWriteFileFullDevice writes to a device that is always full: the
// error says so, and the device is not removed.
func TestWriteFileFullDevice(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	if _, err := WriteFile("/dev/full", smallConfig(Tomo), []uint16{0}, true, "test"); err == nil {
		t.Error("writing to /dev/full succeeded")
	}
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Fatalf("/dev/full is gone: %v", err)
	}
}
