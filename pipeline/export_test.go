package pipeline

import "h5ingest/gpu"

// The external tests (package pipeline_test) run the pipeline with
// sources from packages that import this one (capture, sim); these names
// lend them the internal tests' fixtures.

type (
	MemSink     = memSink
	CountSink   = countSink
	CycleSource = cycleSource
	HostBackend = hostBackend
)

var (
	TestFormat     = testFormat
	TestFrame      = testFrame
	NewMemSink     = newMemSink
	NewCycleSource = newCycleSource
	CheckOutput    = checkOutput
)

// NewHostBackend returns b handing out tracked page-locked memory; its
// AllocHost fails once failAfter buffers are out (0: never).
func NewHostBackend(b gpu.Backend, failAfter int) *HostBackend {
	return &hostBackend{Backend: b, out: map[*byte]bool{}, failAfter: failAfter}
}

// FromHost reports whether p starts in a buffer AllocHost handed out and
// that is not yet freed.
func (b *hostBackend) FromHost(p []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out[&p[0]]
}

// Outstanding returns how many AllocHost buffers are not yet freed.
func (b *hostBackend) Outstanding() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.out)
}

// Chunks returns how many chunks the sink holds.
func (s *countSink) Chunks() int { return s.chunks }
