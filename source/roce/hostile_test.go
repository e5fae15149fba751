package roce

import (
	"context"
	"testing"
)

// TestHeldFrameKeepsItsIdentity holds a frame as the pipeline does (a
// decode still to come) while the front end laps the ring and Next skips
// the frames it overran, until it hands out the frame that went into the
// held frame's slot. The held frame must still be the frame it was (its
// number), and Intact must find it written over. Sharing one
// pipeline.Frame per slot made the held frame turn into the later one,
// which Intact then passed: acquire stored frame n with frame n+slots'
// pixels, status ok.
func TestHeldFrameKeepsItsIdentity(t *testing.T) {
	st, nic := benchStream(t, "none")
	n := uint32(smallFormat.PayloadSize())
	ctx := context.Background()
	slots := uint32(st.cfg.Slots)
	if err := nic.Complete(0, n); err != nil {
		t.Fatal(err)
	}
	held, err := st.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The front end writes a whole ring more; the last write lands
	// in the held frame's slot.
	for i := uint32(1); i <= slots; i++ {
		if err := nic.Complete(i, n); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last := f.Header.FrameNumber == uint64(slots)
		if f != held {
			st.Release(f)
		}
		if last {
			break
		}
	}
	if got := held.Header.FrameNumber; got != 0 {
		t.Errorf("the held frame 0 now says it is frame %d", got)
	}
	if st.Intact(held) {
		t.Error("Intact passed frame 0 although a whole ring more was written while it was held")
	}
}
