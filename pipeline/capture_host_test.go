package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"h5ingest/compress"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/source/capture"
)

// pinCheckBackend is a HostBackend that counts the payloads it is given
// and those of them in memory it handed out (AllocHost).
type pinCheckBackend struct {
	*pipeline.HostBackend
	mu            sync.Mutex
	total, pinned int
}

func (b *pinCheckBackend) Decode(jobs []gpu.Job) error {
	b.mu.Lock()
	for _, j := range jobs {
		b.total++
		if b.FromHost(j.Payload) {
			b.pinned++
		}
	}
	b.mu.Unlock()
	return b.HostBackend.Decode(jobs)
}

// captureOf returns a capture of frames frames of pipeline.TestFormat from modules
// modules, interleaved: frame i is module i%modules's frame i/modules.
func captureOf(t *testing.T, frames, modules int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf, capture.Metadata{Profile: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range frames {
		f := pipeline.TestFrame(t, pipeline.TestFormat, uint64(i/modules))
		f.Header.ModuleID = uint16(i % modules)
		if err := w.WriteFrame(&f.Header, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCaptureSourceHostMemory checks that a replay reads payloads into
// page-locked memory from the pipeline's backend: every payload decoded
// lies in memory the backend handed out, and all of it goes back when the
// scan ends, with one module's pipeline and with two sharing the capture
// through a Demux.
func TestCaptureSourceHostMemory(t *testing.T) {
	const perModule = 12
	for _, modules := range []int{1, 2} {
		t.Run(fmt.Sprint(modules, " modules"), func(t *testing.T) {
			r, err := capture.NewReader(bytes.NewReader(captureOf(t, perModule*modules, modules)))
			if err != nil {
				t.Fatal(err)
			}
			src := capture.NewSource(r, pipeline.TestFormat.PayloadSize())
			cpu, err := gpu.New("cpu", gpu.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			be := &pinCheckBackend{HostBackend: pipeline.NewHostBackend(cpu, 0)}
			run := func(s pipeline.Source, sink *pipeline.MemSink) error {
				p, err := pipeline.New(pipeline.Config{
					Format: pipeline.TestFormat, Frames: perModule, Backend: be, Batch: 2,
					NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", pipeline.TestFormat.PixelSize(), 0) },
				})
				if err != nil {
					return err
				}
				_, err = p.Run(context.Background(), s, sink)
				return err
			}
			sinks := make([]*pipeline.MemSink, modules)
			for m := range sinks {
				sinks[m] = pipeline.NewMemSink()
			}
			if modules == 1 {
				if err := run(src, sinks[0]); err != nil {
					t.Fatal(err)
				}
			} else {
				ids := []uint16{0, 1}
				d := pipeline.NewDemux(src, ids, 2)
				var wg sync.WaitGroup
				errs := make([]error, modules)
				for m := range modules {
					wg.Go(func() {
						ms := d.Module(ids[m])
						errs[m] = run(ms, sinks[m])
						ms.Close()
					})
				}
				if err := d.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, sink := range sinks {
				pipeline.CheckOutput(t, sink, "bslz4", perModule, nil)
			}
			if be.total != perModule*modules || be.pinned != be.total {
				t.Errorf("%d payloads decoded, %d of them in the backend's page-locked memory; want %d, all",
					be.total, be.pinned, perModule*modules)
			}
			if be.Outstanding() != 0 {
				t.Errorf("%d page-locked buffers not given back", be.Outstanding())
			}
		})
	}
}

// TestCaptureSourceHostRefused checks that a backend refusing page-locked
// memory part way leaves the replay on Go memory, every frame written, and
// the buffers it did hand out given back.
func TestCaptureSourceHostRefused(t *testing.T) {
	const frames = 12
	r, err := capture.NewReader(bytes.NewReader(captureOf(t, frames, 1)))
	if err != nil {
		t.Fatal(err)
	}
	src := capture.NewSource(r, pipeline.TestFormat.PayloadSize())
	cpu, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	// The pipeline's 6 image buffers, then 2 payload buffers.
	be := &pinCheckBackend{HostBackend: pipeline.NewHostBackend(cpu, 8)}
	p, err := pipeline.New(pipeline.Config{
		Format: pipeline.TestFormat, Frames: frames, Backend: be, Batch: 2, Workers: 2, Slots: 6,
		NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", pipeline.TestFormat.PixelSize(), 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	sink := pipeline.NewMemSink()
	if _, err := p.Run(context.Background(), src, sink); err != nil {
		t.Fatal(err)
	}
	pipeline.CheckOutput(t, sink, "bslz4", frames, nil)
	if be.pinned == 0 || be.pinned == be.total {
		t.Errorf("%d of %d payloads page-locked; want some, not all", be.pinned, be.total)
	}
	if be.Outstanding() != 0 {
		t.Errorf("%d page-locked buffers not given back", be.Outstanding())
	}
}
