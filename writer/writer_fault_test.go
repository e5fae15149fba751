package writer

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/frame"
)

// checkKept opens the file at path and checks that frames below kept hold
// their chunk and record, and that every later frame is recorded missing.
func checkKept(t *testing.T, path string, o Options, kept int) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatalf("the file of a failed scan does not open: %v", err)
	}
	defer r.Close()
	recs, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != o.Frames {
		t.Fatalf("%d records, want %d", len(recs), o.Frames)
	}
	for i, rec := range recs {
		if i >= kept {
			if rec.Status != frame.StatusMissing {
				t.Errorf("frame %d after the failure: status %d, want missing", i, rec.Status)
			}
			continue
		}
		if want := testRecord(i); rec != want {
			t.Errorf("frame %d written before the failure: record %+v, want %+v", i, rec, want)
		}
		chunk, _, err := r.ReadChunk(i, nil)
		if err != nil {
			t.Errorf("frame %d written before the failure: %v", i, err)
		} else if !bytes.Equal(chunk, pattern(i, o.Height, o.Width, o.ElemSize)) {
			t.Errorf("frame %d written before the failure: chunk differs", i)
		}
	}
}

// TestWriteChunkFailureKeepsWrittenFrames makes H5Dwrite_chunk fail after
// three frames, before any flush: the error sticks, and Close still writes
// the records of the three frames, so the finished file holds them.
func TestWriteChunkFailureKeepsWrittenFrames(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone) // flushes hourly: only Close writes records
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	const kept = 3
	for i := range kept {
		if err := w.WriteChunk(i, 0, pattern(i, o.Height, o.Width, o.ElemSize)); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(i, testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	first := w.WriteChunk(kept, 0, nil) // libhdf5 refuses an empty chunk
	if first == nil {
		t.Fatal("an empty chunk was written")
	}
	for name, err := range map[string]error{
		"WriteChunk": w.WriteChunk(kept+1, 0, pattern(kept+1, o.Height, o.Width, o.ElemSize)),
		"SetRecord":  w.SetRecord(kept+1, testRecord(kept+1)),
		"Flush":      w.Flush(),
		"Close":      w.Close(),
	} {
		if err != first {
			t.Errorf("%s after the failure returned %v, want the first error %v", name, err, first)
		}
	}
	if n := openObjectsAll(); n != 0 {
		t.Errorf("%d HDF5 objects open after Close", n)
	}
	checkKept(t, o.Path, o, kept)
}

// tmpfs mounts a file system of size bytes on a new directory and returns
// it, or skips the test where mounting is not allowed.
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// TestDiskFull writes frames of 1 MiB to a tmpfs of 4 MiB until the disk is
// full: the error says so and sticks, and the closed file holds every frame
// written before it, the rest recorded missing.
func TestDiskFull(t *testing.T) {
	dir := tmpfs(t, "4m")
	o := testOptions(dir, LayoutNXtomo, pipeNone)
	o.Frames, o.Height, o.Width, o.ElemSize = 16, 512, 512, 4
	o.ImageKey, o.RotationAngle = nil, nil
	o.FlushInterval = time.Hour
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	var first error
	for i := range o.Frames {
		if first = w.WriteChunk(i, 0, pattern(i, o.Height, o.Width, o.ElemSize)); first != nil {
			break
		}
		if err := w.SetRecord(i, testRecord(i)); err != nil {
			t.Fatal(err)
		}
		kept++
	}
	if first == nil {
		t.Fatal("16 MiB of frames fit a 4 MiB file system")
	}
	if !errors.Is(first, syscall.ENOSPC) || strings.ContainsAny(first.Error(), "\n") || strings.Contains(first.Error(), "H5FD") || !strings.Contains(Detail(first), "errno = 28") {
		t.Errorf("disk-full error does not say so in one line wrapping ENOSPC, its HDF5 stack in Detail: %v", first)
	}
	if kept == 0 {
		t.Fatal("not even one frame fit")
	}
	if err := w.Close(); err != first {
		t.Errorf("Close returned %v, want the first error", err)
	}
	if n := openObjectsAll(); n != 0 {
		t.Errorf("%d HDF5 objects open after Close", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "."+filepath.Base(o.Path)+".part")); err == nil {
		t.Error("the temporary name is left")
	}
	checkKept(t, o.Path, o, kept)
}

// plainRead reads frame_status with plain h5py (not a SWMR reader) and
// returns it, one digit per frame, or fails the test where h5py cannot
// open the file.
func plainRead(t *testing.T, path, det string) string {
	t.Helper()
	python := pythonWith(t, "h5py", "numpy")
	out, err := exec.Command(python, "-c", `import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print("".join(str(s) for s in f[sys.argv[2] + "/frame_status"][:]))`, path, det).CombinedOutput()
	if err != nil {
		t.Fatalf("plain h5py does not open %s: %v\n%s", path, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestDiskFullNoPlan fills a 4 MiB tmpfs with a scan of 1 MiB frames that
// has no plan (the stack and the records grow), with flushes never and at
// every frame, and frames the pipeline still records missing after the
// failure: every frame whose chunk was written is recorded ok and every
// other frame missing, with no chunk; the records cover every frame the
// writer was told of; and plain h5py opens the file. Before, the records
// could not be grown on the full disk, so the file recorded every frame
// missing, or could not be closed and opened only as a SWMR file.
func TestDiskFullNoPlan(t *testing.T) {
	for _, flush := range []time.Duration{time.Hour, time.Nanosecond} {
		t.Run(flush.String(), func(t *testing.T) {
			dir := tmpfs(t, "4m")
			o := testOptions(dir, LayoutNXtomo, pipeNone)
			o.Frames, o.Height, o.Width, o.ElemSize = 0, 512, 512, 4
			o.ImageKey, o.RotationAngle = nil, nil
			o.FlushInterval = flush
			w, err := Create(o)
			if err != nil {
				t.Fatal(err)
			}
			kept, n := 0, 0
			var first error
			for ; n < 16; n++ {
				if first = w.WriteChunk(n, 0, pattern(n, o.Height, o.Width, o.ElemSize)); first != nil {
					break
				}
				if first = w.SetRecord(n, testRecord(n)); first != nil {
					break
				}
				kept++
			}
			if first == nil {
				t.Fatal("16 MiB of frames fit a 4 MiB file system")
			}
			if !errors.Is(first, syscall.ENOSPC) || strings.ContainsAny(first.Error(), "\n") || strings.Contains(first.Error(), "H5FD") || !strings.Contains(Detail(first), "errno = 28") {
				t.Errorf("disk-full error does not say so in one line wrapping ENOSPC, its HDF5 stack in Detail: %v", first)
			}
			// The pipeline records the frames it saw after the failure
			// missing; an ok record is refused.
			if err := w.SetRecord(n+2, frame.Record{Status: frame.StatusMissing}); err != nil {
				t.Errorf("record of a missing frame after the failure: %v", err)
			}
			if err := w.SetRecord(n+1, testRecord(n+1)); err != first {
				t.Errorf("ok record after the failure: %v, want the first error", err)
			}
			if err := w.Close(); err != first {
				t.Errorf("Close returned %v, want the first error %v", err, first)
			}
			if n := openObjectsAll(); n != 0 {
				t.Errorf("%d HDF5 objects open after Close", n)
			}
			want := strings.Repeat("0", kept) + strings.Repeat("1", n+3-kept)
			if got := plainRead(t, o.Path, "/entry/instrument/detector"); got != want {
				t.Errorf("frame_status %s, want %s (%d frames kept)", got, want, kept)
			}
			r, err := Open(o.Path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Frames != n+3 {
				t.Errorf("stack of %d frames, records of %d", r.Frames, n+3)
			}
			for i := range r.Frames {
				chunk, _, err := r.ReadChunk(i, nil)
				switch {
				case i < kept && (err != nil || !bytes.Equal(chunk, pattern(i, o.Height, o.Width, o.ElemSize))):
					t.Errorf("frame %d, recorded ok: chunk %v", i, err)
				case i >= kept && i != n && err != ErrNoChunk:
					t.Errorf("frame %d, recorded missing, has a chunk (%v)", i, err)
				}
			}
			if _, err := os.Stat(LockName(o.Path)); !os.IsNotExist(err) {
				t.Errorf("lock file left: %v", err)
			}
		})
	}
}

// TestDiskFullNoRoomKept fills the disk of a scan without a plan with no
// room kept for the records (as when another program takes the room the
// writer gave back), flushing at every frame and never: closing the file
// may fail (H5Dclose cannot write the chunk index), and still plain h5py,
// not only a SWMR reader, opens what the file holds, and every frame it
// records as written has its chunk. After a failed close the writer
// clears the file's open-for-writing mark as recover does.
func TestDiskFullNoRoomKept(t *testing.T) {
	noReserve = true
	defer func() { noReserve = false }()
	for _, size := range []string{"2m", "3m"} {
		for _, flush := range []time.Duration{time.Nanosecond, time.Hour} {
			t.Run(size+"/"+flush.String(), func(t *testing.T) {
				dir := tmpfs(t, size)
				o := testOptions(dir, LayoutNXtomo, pipeNone)
				o.Frames, o.Height, o.Width, o.ElemSize = 0, 512, 512, 4
				o.ImageKey, o.RotationAngle = nil, nil
				o.FlushInterval = flush
				w, err := Create(o)
				if err != nil {
					t.Fatal(err)
				}
				var first error
				for n := 0; n < 16 && first == nil; n++ {
					if first = w.WriteChunk(n, 0, pattern(n, o.Height, o.Width, o.ElemSize)); first == nil {
						first = w.SetRecord(n, testRecord(n))
					}
				}
				if first == nil {
					t.Fatal("16 MiB of frames fit a small file system")
				}
				if err := w.Close(); err == nil {
					t.Error("Close after a full disk returned no error")
				}
				status := plainRead(t, o.Path, "/entry/instrument/detector")
				r, err := Open(o.Path)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				for i, s := range status {
					if s != '0' {
						continue
					}
					if chunk, _, err := r.ReadChunk(i, nil); err != nil || !bytes.Equal(chunk, pattern(i, o.Height, o.Width, o.ElemSize)) {
						t.Errorf("frame %d recorded ok: chunk %v", i, err)
					}
				}
			})
		}
	}
}
