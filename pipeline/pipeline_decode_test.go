package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
)

// deviceBackend stands for a device backend (gpu.Reserver) over the CPU
// backend: it records the reservations and how many Decode calls were in
// flight at once. The first call waits, a while, for a second to join it,
// so that a pipeline keeping two batches in flight shows it every time.
type deviceBackend struct {
	gpu.Backend
	failAt     int   // the call that fails; 0: none
	reserveErr error // what Reserve returns

	mu        sync.Mutex
	reserves  []reservation
	released  int
	calls     int
	inFlight  int
	most      int
	early     bool // a Decode call before any Reserve
	joined    chan struct{}
	joinClose sync.Once
}

type reservation struct {
	f            frame.Format
	batch, calls int
	shuffle      bool
}

func newDeviceBackend(t *testing.T) *deviceBackend {
	cpu, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cpu.Close() })
	return &deviceBackend{Backend: cpu, joined: make(chan struct{})}
}

func (b *deviceBackend) Reserve(f frame.Format, batch, calls int, shuffle bool) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserves = append(b.reserves, reservation{f, batch, calls, shuffle})
	if b.reserveErr != nil {
		return nil, b.reserveErr
	}
	return func() {
		b.mu.Lock()
		b.released++
		b.mu.Unlock()
	}, nil
}

func (b *deviceBackend) Decode(jobs []gpu.Job) error {
	b.mu.Lock()
	b.calls++
	n := b.calls
	b.early = b.early || len(b.reserves) == 0
	b.inFlight++
	b.most = max(b.most, b.inFlight)
	if b.inFlight == 2 {
		b.joinClose.Do(func() { close(b.joined) })
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	if n == 1 {
		select {
		case <-b.joined:
		case <-time.After(5 * time.Second):
		}
	}
	if n == b.failAt {
		return errors.New("device lost")
	}
	return b.Backend.Decode(jobs)
}

// TestPipelineDeviceRounds checks that a pipeline on a device backend
// reserves the device's buffers for two full batches of the scan's format
// before its first decode call, keeps two decode calls in flight, gives the
// reservation back at the end, and writes every frame.
func TestPipelineDeviceRounds(t *testing.T) {
	const frames, batch = 24, 4
	be := newDeviceBackend(t)
	p, err := New(Config{
		Format: testFormat, Frames: frames, Backend: be, Batch: batch, BackendShuffle: true,
		NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &sliceSource{frames: testFrames(t, testFormat, frames)}
	sink := newMemSink()
	if _, err := p.Run(context.Background(), src, sink); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, sink, "bslz4", frames, nil)
	want := reservation{testFormat, batch, 2, true}
	if len(be.reserves) != 1 || be.reserves[0] != want {
		t.Errorf("reservations %+v, want one of %+v", be.reserves, want)
	}
	if be.early {
		t.Error("a decode call came before the reservation")
	}
	if be.released != len(be.reserves) {
		t.Errorf("%d reservations given back of %d", be.released, len(be.reserves))
	}
	if be.most != 2 {
		t.Errorf("at most %d decode calls in flight, want 2", be.most)
	}
}

// TestPipelineDeviceRoundsFail checks that when one of the two decode
// goroutines meets a backend failure, the run ends with it, every frame
// is accounted for (written or recorded missing), and every slot and
// payload goes home.
func TestPipelineDeviceRoundsFail(t *testing.T) {
	const frames = 24
	be := newDeviceBackend(t)
	be.failAt = 3
	p, err := New(Config{
		Format: testFormat, Frames: frames, Backend: be, Batch: 2,
		NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &sliceSource{frames: testFrames(t, testFormat, frames)}
	sink := newMemSink()
	_, err = p.Run(context.Background(), src, sink)
	if err == nil || !strings.Contains(err.Error(), "device lost") {
		t.Fatalf("Run: %v, want the backend's failure", err)
	}
	if len(sink.records) != frames {
		t.Errorf("%d records, want %d", len(sink.records), frames)
	}
	missing := 0
	for n, r := range sink.records {
		switch {
		case r.Status == frame.StatusMissing:
			missing++
		case r.Status != frame.StatusOK:
			t.Errorf("frame %d: status %d", n, r.Status)
		}
	}
	if missing == 0 || len(sink.chunks)+missing != frames {
		t.Errorf("%d chunks and %d missing of %d frames", len(sink.chunks), missing, frames)
	}
	if delivered := frames - len(src.frames); src.released != delivered {
		t.Errorf("%d payloads released of %d delivered", src.released, delivered)
	}
}

// TestPipelineReserveRefused checks that a device that cannot reserve its
// buffers at setup costs a warning, not the scan: every frame is written.
func TestPipelineReserveRefused(t *testing.T) {
	const frames = 12
	be := newDeviceBackend(t)
	be.reserveErr = errors.New("out of device memory")
	obs, logs := observer.New(zapcore.WarnLevel)
	p, err := New(Config{
		Format: testFormat, Frames: frames, Backend: be, Batch: 3, Log: zap.New(obs),
		NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &sliceSource{frames: testFrames(t, testFormat, frames)}
	sink := newMemSink()
	if _, err := p.Run(context.Background(), src, sink); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, sink, "bslz4", frames, nil)
	warned := logs.FilterMessageSnippet("device buffers not reserved").All()
	if len(warned) != 1 || !strings.Contains(fmt.Sprint(warned[0].ContextMap()["error"]), "out of device memory") {
		t.Errorf("warnings %v, want one saying the reservation failed and why", logs.All())
	}
	if be.released != 0 {
		t.Errorf("%d refused reservations given back", be.released)
	}
}
