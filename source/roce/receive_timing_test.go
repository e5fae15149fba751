package roce

import (
	"context"
	"testing"

	"h5ingest/config"
	"h5ingest/pipeline"
	"h5ingest/source/roce/internal/verbs"
)

// BenchmarkReceive measures the receiver's own work per frame, from a
// completion on the queue to the frame handed to the pipeline and found
// intact after its read: the stream's poll, its queue, Next, Intact's
// fresh poll and Release. The fake NIC completes writes of bare payloads
// in bursts of 16 (a front end ahead of the pipeline) without placing
// their bytes, so that the figure is the receiver's alone; cpu-ns/frame
// is the CPU time of the whole process per frame, every goroutine's.
func BenchmarkReceive(b *testing.B) {
	st, nic := benchStream(b, "none")
	n := uint32(smallFormat.PayloadSize())
	ctx := context.Background()
	var ow pipeline.OverwritingSource = st
	const burst = 16
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i += burst {
		k := min(burst, b.N-i)
		for j := range k {
			if err := nic.Complete(uint32(i+j), n); err != nil {
				b.Fatal(err)
			}
		}
		for range k {
			f, err := st.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if !ow.Intact(f) {
				b.Fatalf("frame %d overrun", f.Header.FrameNumber)
			}
			st.Release(f)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/frame")
}

// benchStream returns module 0's stream of a receiver of bare payloads
// (header "none") or frames with headers ("frame") in a 32-slot ring,
// ready, and the fake NIC that completes writes at it.
func benchStream(tb testing.TB, header string) (*Stream, *verbs.FakeArrivals) {
	tb.Helper()
	dir := tb.TempDir()
	tb.Setenv(verbs.FakeEnv, dir)
	s := setup(dir, func(s *config.Source) { s.RingSlots = 32; s.FrameHeader = header })
	l, err := Listen(must(ConfigOf(s)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	st := l.streams[0]
	end := FrontEndPort{Module: 0, GID: "fe80::1", QPN: 0x77, PSN: 1}
	if err := st.connect(end); err != nil {
		tb.Fatal(err)
	}
	l.st.frontEnds = map[int]FrontEndPort{0: end}
	if err := l.st.moduleReady(0); err != nil {
		tb.Fatal(err)
	}
	nic, err := verbs.OpenFakeArrivals(dir, st.qp.Num())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nic.Close)
	tb.Cleanup(func() { st.Close() })
	return st, nic
}

// TestReceiveAllocatesNothing checks that taking a frame, from its
// completion to its release, allocates nothing.
func TestReceiveAllocatesNothing(t *testing.T) {
	st, nic := benchStream(t, "none")
	n := uint32(smallFormat.PayloadSize())
	ctx := context.Background()
	i := uint32(0)
	allocs := testing.AllocsPerRun(200, func() {
		if err := nic.Complete(i, n); err != nil {
			t.Fatal(err)
		}
		i++
		f, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Intact(f) {
			t.Fatalf("frame %d overrun", f.Header.FrameNumber)
		}
		st.Release(f)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per frame, want 0", allocs)
	}
}
