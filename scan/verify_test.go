package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"h5ingest/compress"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
	"h5ingest/stock"
	"h5ingest/writer"
)

// TestVerifyStalls makes Verify's reading stop answering at its third
// step, as an HDF5 call on a damaged file did (a file two scans wrote at
// once): Verify gives up after the stall timeout with an error instead of
// hanging, and so it does at once when its context ends (a command's
// SIGTERM) during the stall.
func TestVerifyStalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scan.h5")
	scantest.WriteFrames(t, path, 20, nil)
	if _, err := Verify(context.Background(), stockStages(), path, time.Second); err != nil {
		t.Fatalf("verify of a good file: %v", err)
	}
	// The stalled readings stay stalled until the test ends: a stuck
	// reading left behind must not take the next one's steps.
	release := make(chan struct{})
	defer close(release)
	for _, tt := range []struct {
		name   string
		cancel bool
		want   string
	}{
		{"stall timeout", false, "made no progress for 500ms: the file is damaged"},
		{"context ended", true, "stopped (terminated) before the end"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var steps atomic.Int64
			hang := func() {
				if steps.Add(1) == 3 {
					<-release
				}
			}
			verifyStep.Store(&hang)
			defer verifyStep.Store(nil)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if tt.cancel {
				time.AfterFunc(200*time.Millisecond, func() { cancel(errors.New("terminated")) })
			}
			start := time.Now()
			rep, err := Verify(ctx, stockStages(), path, 500*time.Millisecond)
			if d := time.Since(start); err == nil || !strings.Contains(err.Error(), tt.want) || d > 10*time.Second {
				t.Errorf("stalled verify: %v after %v, want an error saying %q promptly", err, d, tt.want)
			}
			if rep != nil {
				t.Errorf("stalled verify reported %+v, want no report", rep)
			}
		})
	}
}

// TestRecoverLeavesUnreadableFile runs Recover on temporary files it
// cannot read as a scan's file (empty, 64 corrupt bytes in its metadata)
// and on a symbolic link: each keeps its temporary name with its bytes as
// they were, no final name appears, and the error says it was left as it
// was. A sound temporary file is recovered.
func TestRecoverLeavesUnreadableFile(t *testing.T) {
	good := filepath.Join(t.TempDir(), "good.h5")
	scantest.WriteFrames(t, good, 8, nil)
	goodBytes, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := func(off int) []byte {
		b := slices.Clone(goodBytes)
		for i := range 64 {
			b[off+i] ^= 0x5a
		}
		return b
	}
	for _, tt := range []struct {
		name    string
		content []byte
		link    bool
		want    string // "": recovered
	}{
		{"empty", []byte{}, false, "not readable as a scan's file"},
		{"64 corrupt bytes in the superblock", corrupt(0), false, "not readable as a scan's file"},
		{"64 corrupt bytes in the root group", corrupt(96), false, "left as it was"},
		{"symbolic link", goodBytes, true, "a symbolic link"},
		{"sound", goodBytes, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			final := filepath.Join(dir, "scan.h5")
			part := writer.TempName(final)
			target := part
			if tt.link {
				target = filepath.Join(dir, "elsewhere.h5")
				if err := os.Symlink(target, part); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(target, tt.content, 0o644); err != nil {
				t.Fatal(err)
			}
			rep, err := Recover(context.Background(), stockStages(), part, 5*time.Second)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("recover of a sound file: %v", err)
				}
				if _, err := os.Stat(final); err != nil {
					t.Errorf("no final name after recover: %v", err)
				}
				if rep == nil || rep.Temp != part || rep.Final != final || rep.Verify == nil || rep.Verify.Path != final || rep.Verify.Checked != 8 {
					t.Errorf("recover reported %+v, want %s renamed %s and its 8 chunks verified", rep, part, final)
				}
				return
			}
			if rep != nil {
				t.Errorf("a refused recover reported %+v", rep)
			}
			if !errors.Is(err, ErrNotRecovered) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("recover: %v, want an error wrapping ErrNotRecovered saying %q", err, tt.want)
			}
			if _, err := os.Lstat(final); !os.IsNotExist(err) {
				t.Errorf("final name %s after a refused recover: %v", final, err)
			}
			got, err := os.ReadFile(target)
			if err != nil || !bytes.Equal(got, tt.content) {
				t.Errorf("the temporary file changed (%v): %d bytes, had %d", err, len(got), len(tt.content))
			}
			if info, err := os.Lstat(part); err != nil || tt.link != (info.Mode()&os.ModeSymlink != 0) {
				t.Errorf("the temporary name is no longer as it was: %v", err)
			}
		})
	}
}

// TestDecodedSizeChecked reads a file back through a codec whose Decode
// returns more or fewer bytes than a frame (a facility's codec gone
// wrong, a chunk lying about its size): verify reports every chunk, and
// the image reader (inspect --png, the service's preview) refuses the
// frame with an error rather than an image of the wrong size.
func TestDecodedSizeChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scan.h5")
	scantest.WriteFrames(t, path, 4, nil) // 2 x 2 pixels of 2 bytes, unfiltered
	for _, delta := range []int{-2, -8, 2, 1 << 20} {
		stages := registry.New()
		if err := stages.AddCodec(registry.Codec{Name: "liar", Doc: "decodes to the wrong size",
			New: func(int, int) (compress.Codec, error) { return liar(delta), nil }}); err != nil {
			t.Fatal(err)
		}
		if err := stock.Register(stages); err != nil { // its codec of no filter comes second
			t.Fatal(err)
		}
		want := fmt.Sprintf("chunk decompresses to %d bytes, a frame is 8", 8+delta)
		rep, err := Verify(context.Background(), stages, path, DefaultVerifyStall)
		if err == nil || rep == nil || len(rep.Bad) != 4 {
			t.Fatalf("delta %d: verify: %v, %+v; want 4 chunks reported", delta, err, rep)
		}
		for _, f := range rep.Bad {
			if f.Detail != want {
				t.Errorf("delta %d: verify found %q, want %q", delta, f, want)
			}
		}
		if im, err := ReadImage(stages, path, 1); err == nil || !strings.Contains(err.Error(), "frame 1 of "+path+": "+want) {
			size := -1
			if im != nil {
				size = len(im.Data)
			}
			t.Errorf("delta %d: ReadImage: an image of %d bytes, %v; want an error saying %q", delta, size, err, want)
		}
	}
}

// liar is a codec of no filter whose Decode returns the chunk with
// int(l) bytes more (or fewer, below 0).
type liar int

func (l liar) Encode(dst, src []byte) ([]byte, error) { return append(dst, src...), nil }
func (l liar) Decode(dst, src []byte) ([]byte, error) {
	if l < 0 {
		return append(dst, src[:len(src)+int(l)]...), nil
	}
	return append(append(dst, src...), make([]byte, l)...), nil
}
func (l liar) Filters() []compress.Filter { return nil }
func (l liar) Bound(n int) int            { return n }
