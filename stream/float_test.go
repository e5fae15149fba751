package stream

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// floatSeries is a series of a flat-field processor's previews of w x h
// float32 pixels, for a plan of frames whose keys are those of testSeries.
func floatSeries(frames, w, h int) Series {
	s := testSeries(frames)
	s.Width, s.Height, s.ElemSize, s.Float, s.Flatfield, s.Compression = w, h, 4, true, true, ""
	return s
}

// preview returns preview n of w x h pixels: float32, little-endian.
func preview(n, w, h int) []byte {
	b := make([]byte, 4*w*h)
	for i := range w * h {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(n)+float32(i)/float32(w*h)))
	}
	return b
}

// TestFloatSeries has four workers write the previews of a scan's
// projections (image key 0) in any order and skip its other frames, as
// the flat-field processor does: the consumer gets a series that the
// reference parser's rules accept, float32 (image_dtype, tag 85),
// flat-field corrected, every preview in image_id order with its pixels
// as written, and each image's user_data the plan's key and angle with no
// record of the file (it is not a chunk of it).
func TestFloatSeries(t *testing.T) {
	const frames, w, h = 30, 12, 5
	series := floatSeries(frames, w, h)
	st, err := Open(Config{Address: anyPort, Queue: frames, SendTimeout: 5 * time.Second}, series, 4*w*h)
	if err != nil {
		t.Fatal(err)
	}
	sock := pull(t, st.Endpoint())
	defer sock.Close()
	connected(t, st)

	ids := rand.New(rand.NewPCG(3, 4)).Perm(frames)
	var wg sync.WaitGroup
	for wk := range 4 {
		wg.Go(func() {
			for i := wk; i < frames; i += 4 {
				n := ids[i]
				if series.ImageKeys[n] != 0 {
					st.Skip(n)
					continue
				}
				if err := st.WriteFrame(n, preview(n, w, h)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	stats, err := st.Close()
	if err != nil {
		t.Fatal(err)
	}
	const projections = frames / 3
	if stats.Sent != projections || stats.Dropped != 0 || stats.Gaps != 0 || !stats.EndDelivered {
		t.Errorf("stats %+v, want %d sent and the end delivered", stats, projections)
	}
	raw := receive(t, sock)
	msgs := checkScan(t, raw)
	if len(msgs) != projections+2 {
		t.Fatalf("%d messages, want %d", len(msgs), projections+2)
	}
	start := msgs[0]
	if start.ImageDtype != "float32" || start.ImageSizeX != w || start.ImageSizeY != h || !start.Enabled["flatfield_enabled"] {
		t.Errorf("start: dtype %s, %d x %d, flatfield_enabled %v", start.ImageDtype, start.ImageSizeX, start.ImageSizeY, start.Enabled["flatfield_enabled"])
	}
	for i, m := range msgs[1 : len(msgs)-1] {
		n := 3 * i // the projections: key n%3 == 0
		d := m.Data[channel]
		if m.ImageID != uint64(n) || d.Tag != tagFloat32LE || d.Compressed || !bytes.Equal(d.Data, preview(n, w, h)) {
			t.Errorf("image %d: id %d, tag %d, compressed %v, pixels as written %v", n, m.ImageID, d.Tag, d.Compressed, bytes.Equal(d.Data, preview(n, w, h)))
		}
		ud := decode(t, raw[i+1])["user_data"].(map[any]any)
		if _, ok := ud["status"]; ok || ud["image_key"] != uint64(0) || ud["rotation_angle"] != float64(n)*1.5 || len(ud) != 2 {
			t.Errorf("image %d: user_data %v, want the plan's key and angle only", n, ud)
		}
	}
}

// TestWriteFrameRefuses: a preview of the wrong size, a series of the
// scan's chunks, a negative id and a closed stream are errors, not
// images; a float series refuses compression and pixels other than
// float32.
func TestWriteFrameRefuses(t *testing.T) {
	st, err := Open(Config{Address: anyPort, Queue: 2}, floatSeries(4, 3, 2), 24)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteFrame(0, make([]byte, 20)); err == nil {
		t.Error("a preview of 20 bytes for 3 x 2 float32 pixels was taken")
	}
	if err := st.WriteFrame(-1, make([]byte, 24)); err == nil {
		t.Error("image -1 was taken")
	}
	st.Close()
	if err := st.WriteFrame(0, make([]byte, 24)); err == nil {
		t.Error("a preview after Close was taken")
	}
	st.Skip(1) // does nothing, and does not panic

	chunks, err := Open(Config{Address: anyPort, Queue: 2}, testSeries(4), 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer chunks.Close()
	if err := chunks.WriteFrame(0, make([]byte, testW*testH*4)); err == nil {
		t.Error("a series of the scan's chunks took a float preview")
	}
	for name, s := range map[string]Series{
		"compressed": func() Series { s := floatSeries(4, 3, 2); s.Compression = "bslz4"; return s }(),
		"float64":    func() Series { s := floatSeries(4, 3, 2); s.ElemSize = 8; return s }(),
		"float16":    func() Series { s := floatSeries(4, 3, 2); s.ElemSize = 2; return s }(),
	} {
		if st, err := Open(Config{Address: anyPort}, s, 64); err == nil {
			st.Close()
			t.Errorf("%s float series: opened", name)
		}
	}
}

// TestWriteFrameAllocatesNothing: a preview is copied into a free buffer
// or left out, with no allocation either way.
func TestWriteFrameAllocatesNothing(t *testing.T) {
	const w, h = 16, 8
	st, err := Open(Config{Address: anyPort, Queue: 2, SendTimeout: time.Millisecond}, floatSeries(0, w, h), 4*w*h)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := preview(1, w, h)
	n := 0
	if a := testing.AllocsPerRun(200, func() {
		st.WriteFrame(n, p)
		n++
	}); a != 0 {
		t.Errorf("%v allocations per preview", a)
	}
}

// TestFloatSeriesSlowConsumer: a consumer that takes nothing while a
// stage writes a scan's 60 previews never holds the stage back: every
// WriteFrame returns while the test holds the consumer stopped (one that
// waited for it would wait until the outer bound), the previews it could
// not take are counted slow by then, and once let go the consumer gets
// those sent in image_id order, followed by the end.
func TestFloatSeriesSlowConsumer(t *testing.T) {
	const frames, w, h = 60, 512, 256 // 512 KiB a preview: more than the kernel holds
	st, err := Open(Config{Address: anyPort, Queue: 2, SendTimeout: 50 * time.Millisecond, Linger: time.Minute}, floatSeries(frames, w, h), 4*w*h)
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	got, err := heldConsumer(st.Endpoint(), hold, 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	connected(t, st)
	written := make(chan error, 1)
	go func() {
		for n := range frames {
			if err := st.WriteFrame(n, preview(n, w, h)); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a real hang: WriteFrame waits for the consumer
		close(hold)
		t.Fatalf("WriteFrame waited for a consumer that took nothing: %+v", st.Stats())
	}
	held := st.Stats()
	close(hold)
	stats, err := st.Close()
	if err != nil {
		t.Fatal(err)
	}
	msgs := checkScan(t, <-got)
	t.Logf("while the consumer was held: %+v; at the end %+v", held, stats)
	if held.Slow == 0 {
		t.Errorf("every preview written while the consumer took nothing, stats %+v: want some counted slow", held)
	}
	if stats.Sent+stats.Dropped != frames || stats.Dropped != stats.Slow || int(stats.Sent) != len(msgs)-2 || !stats.EndDelivered {
		t.Errorf("stats %+v with %d images received, want the rest slow, those sent received and the end delivered", stats, len(msgs)-2)
	}
}
