package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
)

// losingDevice is a device backend (it reserves, so the pipeline keeps
// two decode calls in flight) that decodes its first good calls on the CPU
// and then loses its device for good, as a sticky CUDA error does: the
// call the loss strikes leaves its images garbled, and every later call
// fails at once.
type losingDevice struct {
	gpu.Backend
	mu    sync.Mutex
	good  int
	calls int
}

func (d *losingDevice) Reserve(frame.Format, int, int, bool) (func(), error) { return func() {}, nil }

func (d *losingDevice) Name() string { return "cuda" }

func (d *losingDevice) Decode(jobs []gpu.Job) error {
	d.mu.Lock()
	d.calls++
	lost := d.calls > d.good
	d.mu.Unlock()
	if !lost {
		return d.Backend.Decode(jobs)
	}
	for i := range jobs {
		clear(jobs[i].Image)
		jobs[i].RawCRC, jobs[i].DataCRC = 0xdead, 0xbeef
	}
	return fmt.Errorf("%w: CUDA error 700 (an illegal memory access)", gpu.ErrDeviceLost)
}

// TestFallbackOnDeviceLost loses the device backend's device after two
// decode calls of a 24-frame scan. With a fallback every frame is decoded
// by it, byte for byte as by the CPU from the start, each recorded OK with
// its CRCs, and Run returns no error; without one, or where the fallback
// cannot open, the frames from the loss on are recorded missing and Run
// says the device was lost. A backend that fails otherwise (not a lost
// device) is not replaced.
func TestFallbackOnDeviceLost(t *testing.T) {
	const frames = 24
	for _, tc := range []struct {
		name     string
		fallback func() (gpu.Backend, error)
		notLost  bool // the backend fails, but its device is not lost
		wantAll  bool // every frame decoded
		wantErr  string
	}{
		{name: "fallback", fallback: func() (gpu.Backend, error) { return gpu.New("cpu", gpu.Options{}) }, wantAll: true},
		{name: "none", wantErr: "device lost"},
		{name: "fallback-fails", fallback: func() (gpu.Backend, error) { return nil, errors.New("no workers") }, wantErr: "no workers"},
		{name: "not-lost", fallback: func() (gpu.Backend, error) { return gpu.New("cpu", gpu.Options{}) }, notLost: true, wantErr: "backend closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cpu, err := gpu.New("cpu", gpu.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			var backend gpu.Backend = &losingDevice{Backend: cpu, good: 2}
			if tc.notLost {
				closed, _ := gpu.New("cpu", gpu.Options{})
				closed.Close()
				backend = &closedDevice{closed}
			}
			opened := 0
			fallback := tc.fallback
			if fallback != nil {
				fallback = func() (gpu.Backend, error) { opened++; return tc.fallback() }
			}
			p, err := New(Config{
				Format: testFormat, Frames: frames, Backend: backend, Fallback: fallback, Batch: 4, Workers: 2,
				NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) },
			})
			if err != nil {
				t.Fatal(err)
			}
			src := &sliceSource{frames: testFrames(t, testFormat, frames)}
			payloadCRC := payloadCRCs(src.frames)
			sink := newMemSink()
			progress, err := p.Run(context.Background(), src, sink)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Run: %v, want %q", err, tc.wantErr)
			}
			if len(sink.records) != frames {
				t.Fatalf("%d frames recorded, want %d", len(sink.records), frames)
			}
			codec, _ := compress.New("bslz4", testFormat.PixelSize(), 0)
			for n := range frames {
				rec := sink.records[n]
				if rec.Status != frame.StatusOK {
					continue
				}
				img, err := codec.Decode(nil, sink.chunks[n])
				_, want := testImage(testFormat, uint64(n))
				if err != nil || !slices.Equal(img, want) || rec.DataCRC != frame.Checksum(want) || rec.RawCRC != payloadCRC[n] {
					t.Errorf("frame %d recorded OK but stored otherwise than decoded (%v, record %+v)", n, err, rec)
				}
			}
			fell, name := p.FellBack()
			switch {
			case tc.wantAll:
				if progress.OK != frames || progress.Written != frames {
					t.Errorf("counts %+v, written %d; want all %d OK", progress.Counts, progress.Written, frames)
				}
				if opened != 1 || !fell || name != "cpu" {
					t.Errorf("fallback opened %d times, FellBack %v %q; want once, cpu", opened, fell, name)
				}
			case tc.notLost:
				if opened != 0 || fell {
					t.Errorf("a backend that failed without losing its device was replaced (%d opened)", opened)
				}
			default:
				if progress.OK < 4 || progress.OK >= frames || progress.OK+progress.Missing != frames || fell {
					t.Errorf("counts %+v, FellBack %v; want the frames before the loss OK, the rest missing", progress.Counts, fell)
				}
			}
		})
	}
}

// closedDevice is a device backend that fails for another cause than a
// lost device: its backend is closed.
type closedDevice struct{ gpu.Backend }

func (d *closedDevice) Reserve(frame.Format, int, int, bool) (func(), error) { return func() {}, nil }
