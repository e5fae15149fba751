package stream

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/pipeline/pipelinetest"
)

// slowConsumer reads a stream as a consumer slower than the scan does:
// one message every delay, holding one message in ZeroMQ and little in
// the kernel, so that the stream has to wait for it. It returns the
// messages up to and with the end, or what came before its timeout.
func slowConsumer(endpoint string, delay, timeout time.Duration) (<-chan [][]byte, error) {
	return heldConsumer(endpoint, nil, delay, timeout)
}

// heldConsumer is slowConsumer connected at once but taking no message
// until hold is closed (where hold is not nil): a consumer that the test
// stops for as long as it likes.
func heldConsumer(endpoint string, hold <-chan struct{}, delay, timeout time.Duration) (<-chan [][]byte, error) {
	sock, err := zmq.NewSocket(zmq.PULL)
	if err != nil {
		return nil, err
	}
	for _, set := range []func() error{
		func() error { return sock.SetRcvhwm(1) },
		func() error { return sock.SetRcvbuf(16 << 10) },
		func() error { return sock.SetRcvtimeo(timeout) },
		func() error { return sock.SetLinger(0) },
		func() error { return sock.Connect(endpoint) },
	} {
		if err := set(); err != nil {
			sock.Close()
			return nil, err
		}
	}
	got := make(chan [][]byte, 1)
	go func() {
		defer sock.Close()
		if hold != nil {
			<-hold
		}
		var msgs [][]byte
		for {
			b, err := sock.RecvBytes(0)
			if err != nil {
				break
			}
			msgs = append(msgs, b)
			if m, err := parseStream2(b); err == nil && m.Type == "end" {
				break
			}
			time.Sleep(delay)
		}
		got <- msgs
	}()
	return got, nil
}

// TestSlowConsumerGetsTheEnd runs 20 scans, side by side, each to a
// consumer that takes 0.3 s a message while the scan offers one every 10
// ms: in every run the consumer gets the start, images in order, and the
// end message; the stream's images_sent is what the consumer received;
// the images left out are counted as the consumer's slowness.
func TestSlowConsumerGetsTheEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("20 slow consumers take about 10 s")
	}
	const runs, frames = 20, 24
	const w, h = 512, 256 // 512 KiB a message: the kernel holds a few
	codec, _ := compress.New("none", 4, 0)
	chunk := make([]byte, w*h*4)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	var wg sync.WaitGroup
	for run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := testSeries(frames)
			s.Width, s.Height, s.Compression = w, h, ""
			st, err := Open(Config{Address: anyPort, Queue: 8, Linger: 15 * time.Second}, s, codec.Bound(len(chunk)))
			if err != nil {
				t.Error(err)
				return
			}
			got, err := slowConsumer(st.Endpoint(), 300*time.Millisecond, 30*time.Second)
			if err != nil {
				t.Error(err)
				st.Close()
				return
			}
			connected(t, st)
			sink := st.Sink(discard{})
			for n := range frames {
				sink.WriteChunk(n, chunk)
				sink.SetRecord(n, frame.Record{Timestamp: uint64(n) * 1e6})
				time.Sleep(10 * time.Millisecond)
			}
			begin := time.Now()
			stats, err := st.Close()
			took := time.Since(begin)
			msgs := <-got
			if err != nil || !stats.EndDelivered {
				t.Errorf("run %d: Close after %v: %v, stats %+v", run, took, err, stats)
			}
			if len(msgs) == 0 {
				t.Errorf("run %d: the consumer got nothing", run)
				return
			}
			m := checkScan(t, msgs)
			if images := uint64(len(m) - 2); images != stats.Sent || stats.Sent+stats.Dropped != frames || stats.Dropped != stats.Slow {
				t.Errorf("run %d: the consumer got %d images; stats %+v", run, images, stats)
			}
			if run == 0 {
				t.Logf("run 0: %d images received, %d left out (slow consumer); Close waited %v for the consumer", stats.Sent, stats.Dropped, took.Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
}

// TestStalledConsumerBoundsClose: a consumer that connects and never
// reads. Close returns within the linger (and a little), says the end was
// not delivered, and counts what ZeroMQ could not deliver.
func TestStalledConsumerBoundsClose(t *testing.T) {
	const w, h, frames = 512, 256, 40
	chunk := make([]byte, w*h*4)
	s := testSeries(frames)
	s.Width, s.Height, s.Compression = w, h, ""
	st, err := Open(Config{Address: anyPort, Queue: 4, SendTimeout: 20 * time.Millisecond, Linger: 500 * time.Millisecond}, s, len(chunk))
	if err != nil {
		t.Fatal(err)
	}
	got, err := slowConsumer(st.Endpoint(), time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_ = got // it never returns: its socket goes with the test process
	connected(t, st)
	sink := st.Sink(discard{})
	for n := range frames {
		sink.WriteChunk(n, chunk)
		sink.SetRecord(n, frame.Record{})
		time.Sleep(2 * time.Millisecond)
	}
	begin := time.Now()
	stats, err := st.Close()
	took := time.Since(begin)
	if err == nil || !strings.Contains(err.Error(), "did not take the end of series") || stats.EndDelivered {
		t.Errorf("Close: %v, stats %+v; want the end not delivered", err, stats)
	}
	if stats.Sent+stats.Dropped != frames || stats.Slow == 0 || stats.NoConsumer != 0 {
		t.Errorf("stats %+v: want %d in all, some left out for a slow consumer, none for no consumer", stats, frames)
	}
	if took > time.Second {
		t.Errorf("Close took %v with a linger of 500 ms", took)
	}
}

// frameSource hands out a fixed set of frames, then io.EOF.
type frameSource struct{ frames []*pipeline.Frame }

func (s *frameSource) Next(ctx context.Context) (*pipeline.Frame, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(s.frames) == 0 {
		return nil, io.EOF
	}
	f := s.frames[0]
	s.frames = s.frames[1:]
	return f, nil
}

func (s *frameSource) Release(*pipeline.Frame) {}

// orderSink notes the order the pipeline stores chunks in.
type orderSink struct {
	pipeline.Sink
	order []int
}

func (s *orderSink) WriteChunk(n int, c []byte) error {
	s.order = append(s.order, n)
	return s.Sink.WriteChunk(n, c)
}

// jitter is a processor stage whose time varies from frame to frame, as
// a worker's does on a loaded machine.
type jitter struct{}

func (jitter) Process(n int, _ frame.Format, _ []byte) error {
	time.Sleep(time.Duration(n*7919%5) * 300 * time.Microsecond)
	return nil
}

// TestImagesInOrderUnderLoad runs scans through a real pipeline with eight
// compression workers, each frame's processing taking its own time, while
// other goroutines load every core, so that the workers finish frames out
// of order: the consumer gets every image, in image_id order, each the
// chunk the file got.
func TestImagesInOrderUnderLoad(t *testing.T) {
	const frames, scans = 300, 4
	f := frame.Format{
		Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64},
		Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR,
	}
	cpu, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	stop := make(chan struct{})
	var load sync.WaitGroup
	for range runtime.NumCPU() * 2 {
		load.Add(1)
		go func() {
			defer load.Done()
			x := 1.0
			for {
				select {
				case <-stop:
					return
				default:
				}
				for range 1000 {
					x = x*1.0000001 + 1e-9
				}
				runtime.Gosched()
			}
		}()
	}
	defer func() { close(stop); load.Wait() }()
	inversions := 0
	for scan := range scans {
		p, err := pipeline.New(pipeline.Config{
			Format: f, Frames: frames, Backend: cpu, Workers: 8, Slots: 32,
			NewCodec:     func() (compress.Codec, error) { return compress.New("bslz4", f.PixelSize(), 0) },
			NewProcessor: func() (pipeline.Processor, error) { return jitter{}, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		codec, _ := compress.New("bslz4", f.PixelSize(), 0)
		s := testSeries(frames)
		s.Width, s.Height, s.ElemSize = f.Width(), f.Height(), f.PixelSize()
		st, err := Open(Config{Address: anyPort, Queue: frames, SendTimeout: 5 * time.Second}, s, codec.Bound(f.ImageSize()))
		if err != nil {
			t.Fatal(err)
		}
		sock := pull(t, st.Endpoint())
		connected(t, st)
		mem := newMemSink()
		file := &orderSink{Sink: mem}
		if _, err := p.Run(context.Background(), &frameSource{pipelinetest.Frames(f, frames)}, st.Sink(file)); err != nil {
			t.Fatal(err)
		}
		stats, err := st.Close()
		if err != nil {
			t.Fatal(err)
		}
		msgs := checkScan(t, receive(t, sock)) // in image_id order
		sock.Close()
		for i := 1; i < len(file.order); i++ {
			if file.order[i] < file.order[i-1] {
				inversions++
			}
		}
		if stats.Sent != frames || stats.Dropped != 0 || stats.Gaps != 0 || len(msgs) != frames+2 {
			t.Fatalf("scan %d: %d messages, stats %+v; want every image", scan, len(msgs), stats)
		}
		for i, m := range msgs[1 : len(msgs)-1] {
			if m.ImageID != uint64(i) || string(m.Data[channel].Data) != string(mem.chunks[i]) {
				t.Fatalf("scan %d: message %d is image %d, or not the file's chunk", scan, i+1, m.ImageID)
			}
		}
	}
	t.Logf("%d scans of %d frames: the pipeline stored chunks out of order %d times; the stream sent every image in order", scans, frames, inversions)
	if inversions == 0 {
		t.Error("the workers finished every frame in order: the test did not exercise the window")
	}
}

// TestMemoryFlatAcrossScans streams many scans to a consumer, keeping
// every ended stream as a service's history and metrics keep them: the
// heap in use stays level after the first scans (an ended stream keeps its
// counts, never its buffers), and so do the process's threads and
// descriptors (each stream's ZeroMQ context ends with it).
func TestMemoryFlatAcrossScans(t *testing.T) {
	const scans, frames = 40, 100
	const maxChunk = 1 << 20 // each stream holds 8 buffers of 1 MiB
	codec, _ := compress.New("bslz4", 4, 0)
	chunk, _ := codec.Encode(nil, testImage(1))
	var kept []*Stream
	heap := make([]uint64, scans)
	var threads0, fds0, threads, fds int
	for i := range scans {
		st, err := Open(Config{Address: anyPort}, testSeries(frames), maxChunk)
		if err != nil {
			t.Fatal(err)
		}
		sock := pull(t, st.Endpoint())
		var n atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				b, err := sock.RecvBytes(0)
				if err != nil {
					return
				}
				n.Add(1)
				if m, err := parseStream2(b); err == nil && m.Type == "end" {
					return
				}
			}
		}()
		connected(t, st)
		sink := st.Sink(discard{})
		for f := range frames {
			sink.WriteChunk(f, chunk)
			sink.SetRecord(f, frame.Record{})
		}
		stats, err := st.Close()
		<-done
		sock.Close()
		if err != nil || stats.Sent+stats.Dropped != frames {
			t.Fatalf("scan %d: %v, stats %+v", i, err, stats)
		}
		kept = append(kept, st)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap[i] = ms.HeapInuse
		threads, fds = procThreads(t), openFiles(t)
		if i == 4 {
			threads0, fds0 = threads, fds
		}
	}
	t.Logf("heap in use after scans 1, 5, 10, 20, 40: %d, %d, %d, %d, %d KiB; threads %d then %d, descriptors %d then %d; %d streams kept",
		heap[0]>>10, heap[4]>>10, heap[9]>>10, heap[19]>>10, heap[39]>>10, threads0, threads, fds0, fds, len(kept))
	// 35 more scans each keeping its 8 MiB of buffers would add 280 MiB.
	if grew := int64(heap[scans-1]) - int64(heap[4]); grew > 8<<20 {
		t.Errorf("the heap grew %d KiB from scan 5 to scan %d", grew>>10, scans)
	}
	if threads > threads0+2 || fds > fds0+4 {
		t.Errorf("threads %d then %d, descriptors %d then %d", threads0, threads, fds0, fds)
	}
}

// procThreads returns the threads of the process.
func procThreads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads in /proc/self/status")
	return 0
}

// openFiles returns the descriptors the process holds.
func openFiles(t *testing.T) int {
	d, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(fmt.Sprint("no /proc/self/fd: ", err))
	}
	return len(d)
}

// TestConsumerWaitingForTheBind: a consumer started before a scan so short
// that it ends before ZeroMQ has connected the consumer still gets the
// whole series: the stream gives a consumer waiting for its bind the time
// to connect.
func TestConsumerWaitingForTheBind(t *testing.T) {
	const frames = 5
	codec, _ := compress.New("bslz4", 4, 0)
	port := freePort(t)
	cons := pull(t, "tcp://"+port) // before the bind: ZeroMQ retries
	defer cons.Close()
	st, err := Open(Config{Address: "tcp://" + port, Queue: frames}, testSeries(frames), codec.Bound(testW*testH*4))
	if err != nil {
		t.Fatal(err)
	}
	feed(t, st, codec, frames)
	stats, err := st.Close()
	if err != nil || stats.Sent != frames || !stats.EndDelivered {
		t.Errorf("Close: %v, stats %+v", err, stats)
	}
	if msgs := checkScan(t, receive(t, cons)); len(msgs) != frames+2 {
		t.Errorf("%d messages, want %d", len(msgs), frames+2)
	}
}

// freePort returns a loopback HOST:PORT that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestConsumerLeavesMidScan: a consumer that goes away during the scan.
// The images after it left are counted for want of a consumer, the end
// says no consumer was connected, and Close does not wait for the linger.
func TestConsumerLeavesMidScan(t *testing.T) {
	codec, _ := compress.New("bslz4", 4, 0)
	st, err := Open(Config{Address: anyPort, Queue: 4, SendTimeout: 20 * time.Millisecond, Linger: 5 * time.Second}, testSeries(0), codec.Bound(testW*testH*4))
	if err != nil {
		t.Fatal(err)
	}
	sock := pull(t, st.Endpoint())
	connected(t, st)
	sink := st.Sink(discard{})
	chunk, _ := codec.Encode(nil, testImage(1))
	n := 0
	offer := func() {
		sink.WriteChunk(n, chunk)
		sink.SetRecord(n, frame.Record{})
		n++
		time.Sleep(5 * time.Millisecond)
	}
	for range 20 {
		offer()
	}
	sock.Close() // the consumer goes; the stream sees it as it sends
	for deadline := time.Now().Add(5 * time.Second); st.net.consumers() != 0; offer() {
		if time.Now().After(deadline) {
			t.Fatal("the stream still counts the consumer 5 s after it left")
		}
	}
	for range 20 {
		offer()
	}
	begin := time.Now()
	stats, err := st.Close()
	took := time.Since(begin)
	if err == nil || !strings.Contains(err.Error(), "no consumer connected") || stats.EndDelivered {
		t.Errorf("Close: %v, stats %+v; want no consumer", err, stats)
	}
	if stats.Sent == 0 || stats.NoConsumer < 20 || stats.Sent+stats.Dropped != uint64(n) {
		t.Errorf("stats %+v of %d images: want some sent before the consumer left, the last 20 at least counted for no consumer", stats, n)
	}
	if took > time.Second {
		t.Errorf("Close took %v with no consumer left (linger 5 s)", took)
	}
}

// TestMissingFramesCostNoImage streams a scan in which every 20th frame
// is missing, to a consumer that keeps up: each frame is offered once a
// buffer is free, as it is where the consumer takes images as fast as the
// detector makes them. A missing frame either never comes (lost on its
// way, or dropped by a full pipeline, and so recorded only at the scan's
// end) or is recorded missing as it happens (a frame the pipeline could
// not decode). Either way the consumer gets every other image, in order,
// and no image is dropped; the end counts a frame that never came as a
// skipped image_id.
func TestMissingFramesCostNoImage(t *testing.T) {
	const frames, queue = 200, 8
	codec, _ := compress.New("bslz4", 4, 0)
	chunk, _ := codec.Encode(nil, testImage(1))
	for _, tc := range []struct {
		name     string
		recorded bool // the scan records the frame missing in its turn
		gaps     uint64
	}{
		{"never comes", false, frames / 20},
		{"recorded missing", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Open(Config{Address: anyPort, Queue: queue, SendTimeout: 5 * time.Second}, testSeries(frames), codec.Bound(testW*testH*4))
			if err != nil {
				t.Fatal(err)
			}
			sock := pull(t, st.Endpoint())
			defer sock.Close()
			got := make(chan [][]byte, 1)
			go func() { got <- receive(t, sock) }()
			connected(t, st)
			sink := st.Sink(discard{})
			var want []uint64
			for n := range frames {
				if n%20 == 10 {
					if tc.recorded {
						sink.SetRecord(n, frame.Record{Status: frame.StatusMissing})
					}
					continue
				}
				awaitBuffer(t, st) // a consumer that keeps up frees one
				sink.WriteChunk(n, chunk)
				sink.SetRecord(n, frame.Record{})
				want = append(want, uint64(n))
			}
			stats, err := st.Close()
			msgs := checkScan(t, <-got)
			var ids []uint64
			for _, m := range msgs[1 : len(msgs)-1] {
				ids = append(ids, m.ImageID)
			}
			if err != nil || !slices.Equal(ids, want) {
				t.Errorf("Close: %v; the consumer got images %v, want %v", err, ids, want)
			}
			if stats.Sent != uint64(len(want)) || stats.Dropped != 0 || stats.Gaps != tc.gaps || !stats.EndDelivered {
				t.Errorf("stats %+v, want %d sent, none dropped, %d image_ids skipped", stats, len(want), tc.gaps)
			}
		})
	}
}

// awaitBuffer waits until one of the stream's buffers is free, as one is
// whenever an image comes where the consumer keeps up, failing the test
// after 10 s.
func awaitBuffer(t *testing.T, st *Stream) {
	t.Helper()
	select {
	case b := <-st.free:
		st.free <- b
	case <-time.After(10 * time.Second):
		t.Fatal("no buffer came free in 10 s: the window or the sender holds every one")
	}
}

// endCounts returns the images_sent of an end message.
func endCounts(t *testing.T, end []byte) uint64 {
	t.Helper()
	ud, _ := decode(t, end)["user_data"].(map[any]any)
	n, ok := ud["images_sent"].(uint64)
	if !ok {
		t.Fatalf("end user_data %v: no images_sent", ud)
	}
	return n
}

// series receives one series from sock, start to end, and returns the
// images it held and its end's images_sent.
func series(t *testing.T, sock *zmq.Socket) (images int, sent uint64) {
	t.Helper()
	raw := receive(t, sock)
	msgs := checkScan(t, raw)
	return len(msgs) - 2, endCounts(t, raw[len(raw)-1])
}

// TestConsumerConnectedAcrossScans streams 30 scans, one after the
// other, each to a consumer that reads every message: one consumer that
// stays connected to the scans' address throughout, as beside a
// detector's, or (with a port chosen at each bind) one per scan. Half the
// scans offer each frame once a buffer is free, as a consumer that keeps
// up allows; the others offer them all at once, faster than any consumer
// takes them. In every scan the consumer gets the series from start to
// end; the end says it was delivered, and its images_sent and the
// stream's count of images sent are the images the consumer got; the
// consumer that stays connected is connected as each stream opens, and no
// image is counted as having had no consumer.
func TestConsumerConnectedAcrossScans(t *testing.T) {
	const scans, frames = 30, 40
	codec, _ := compress.New("bslz4", 4, 0)
	chunk, _ := codec.Encode(nil, testImage(1))
	stays := "tcp://" + freePort(t)
	var sock *zmq.Socket
	for _, address := range []string{stays, anyPort} {
		for scan := range scans {
			st, err := Open(Config{Address: address, Queue: 4, SendTimeout: 5 * time.Second}, testSeries(frames), codec.Bound(testW*testH*4))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case address == anyPort || scan == 0:
				if sock != nil {
					sock.Close()
				}
				sock = pull(t, st.Endpoint())
				connected(t, st)
			case st.net.consumers() == 0:
				st.Close()
				t.Fatalf("%s, scan %d: the consumer of the scan before is not connected as the stream opens", address, scan)
			}
			type result struct {
				images int
				sent   uint64
			}
			got := make(chan result, 1)
			go func() {
				images, sent := series(t, sock)
				got <- result{images, sent}
			}()
			sink := st.Sink(discard{})
			for n := range frames {
				if scan%2 == 0 {
					awaitBuffer(t, st) // the consumer keeps up
				}
				sink.WriteChunk(n, chunk)
				sink.SetRecord(n, frame.Record{})
			}
			stats, err := st.Close()
			r := <-got
			if err != nil || !stats.EndDelivered || stats.NoConsumer != 0 || stats.Sent+stats.Dropped != frames ||
				uint64(r.images) != stats.Sent || r.sent != stats.Sent || (scan%2 == 0 && stats.Sent != frames) {
				t.Errorf("%s, scan %d: Close: %v, stats %+v; the consumer got %d images and an end saying %d sent",
					address, scan, err, stats, r.images, r.sent)
			}
		}
	}
	sock.Close()
}

// TestUndeliveredEndCountsExact streams scans on one address to a
// consumer that reads nothing while each scan runs and ends, so that the
// end is not delivered within the linger, and that then reads what is
// left up to the next scan's start. The stream says the end was not
// delivered, and its count of images sent is what the consumer gets of
// that scan: the images ZeroMQ took stay queued for the consumer, which
// stays connected. The end comes later where Close said it stays queued,
// and says the same count.
func TestUndeliveredEndCountsExact(t *testing.T) {
	const scans, frames = 5, 30
	const w, h = 1024, 512 // 2 MiB a message: the queue's four are more than the kernel holds
	chunk := make([]byte, w*h*4)
	address := "tcp://" + freePort(t)
	sock, err := zmq.NewSocket(zmq.PULL)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	for _, set := range []error{sock.SetRcvhwm(1), sock.SetRcvbuf(16 << 10), sock.SetRcvtimeo(10 * time.Second), sock.SetLinger(0), sock.Connect(address)} {
		if set != nil {
			t.Fatal(set)
		}
	}
	images := map[string]int{}  // by series_unique_id
	ends := map[string]uint64{} // images_sent of the ends that came
	sent := map[string]uint64{} // the stream's count
	queued := map[string]bool{} // whether Close said the end stays queued
	// readTo reads up to the start of the series id.
	readTo := func(id string) {
		for {
			b, err := sock.RecvBytes(0)
			if err != nil {
				t.Fatalf("waiting for the start of %s: %v", id, err)
			}
			m, err := parseStream2(b)
			if err != nil {
				t.Fatal(err)
			}
			switch m.Type {
			case "start":
				if m.SeriesUniqueID == id {
					return
				}
			case "image":
				images[m.SeriesUniqueID]++
			case "end":
				ends[m.SeriesUniqueID] = endCounts(t, b)
			}
		}
	}
	for scan := range scans + 1 {
		s := testSeries(frames)
		s.ScanID, s.Width, s.Height, s.Compression = fmt.Sprint("scan-", scan), w, h, ""
		st, err := Open(Config{Address: address, Queue: 4, SendTimeout: 20 * time.Millisecond, Linger: 200 * time.Millisecond}, s, len(chunk))
		if err != nil {
			t.Fatal(err)
		}
		connected(t, st)
		readTo(st.UniqueID()) // the scans before, then this one's start
		if scan == scans {
			st.Close()
			break
		}
		sink := st.Sink(discard{})
		for n := range frames {
			sink.WriteChunk(n, chunk)
			sink.SetRecord(n, frame.Record{})
		}
		stats, err := st.Close()
		if err == nil || stats.EndDelivered || !strings.Contains(err.Error(), "did not take the end of series within the linger") || stats.Sent+stats.Dropped != frames {
			t.Errorf("scan %d: Close: %v, stats %+v; want the end not delivered within the linger", scan, err, stats)
		}
		sent[st.UniqueID()] = stats.Sent
		if err != nil {
			queued[st.UniqueID()] = strings.Contains(err.Error(), "stays queued")
		}
	}
	for id, n := range sent {
		end, came := ends[id]
		if uint64(images[id]) != n || (came && end != n) || came != queued[id] {
			t.Errorf("series %s: the stream counted %d images sent and said the end stays queued: %v; the consumer got %d images, and an end (%v) saying %d",
				id, n, queued[id], images[id], came, end)
		}
	}
	t.Logf("%d scans: images sent %v; ends that came later %v", scans, sent, ends)
}

// TestKeptPortYields: a port kept bound after its stream is taken by the
// next stream of the same address, refused to a second stream while the
// first has it, and yielded to a stream of another address of the same
// port once no stream has it.
func TestKeptPortYields(t *testing.T) {
	port := freePort(t)
	_, p, _ := net.SplitHostPort(port)
	loopback, wildcard := "tcp://"+port, "tcp://*:"+p
	a, err := Open(Config{Address: loopback}, testSeries(0), 64)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := Open(Config{Address: loopback}, testSeries(0), 64); err == nil {
		b.Close()
		t.Errorf("a second stream of %s opened while the first has it", loopback)
	}
	if b, err := Open(Config{Address: wildcard}, testSeries(0), 64); err == nil {
		b.Close()
		t.Errorf("a stream of %s opened while one of %s has the port", wildcard, loopback)
	}
	a.Close()
	for _, address := range []string{loopback, wildcard, loopback} {
		st, err := Open(Config{Address: address}, testSeries(0), 64)
		if err != nil {
			t.Fatalf("open %s after the stream before closed: %v", address, err)
		}
		st.Close()
	}
}

// TestCloseKept checks that CloseKept closes the sockets kept bound
// between streams, so that the port is free again, and leaves alone a
// socket a stream has.
func TestCloseKept(t *testing.T) {
	idlePort, busyPort := freePort(t), freePort(t)
	idle, err := Open(Config{Address: "tcp://" + idlePort}, testSeries(0), 64)
	if err != nil {
		t.Fatal(err)
	}
	idle.Close()
	busy, err := Open(Config{Address: "tcp://" + busyPort}, testSeries(0), 64)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if l, err := net.Listen("tcp", idlePort); err == nil {
		l.Close()
		t.Fatalf("%s free before CloseKept: the socket was not kept", idlePort)
	}
	CloseKept(time.Second)
	l, err := net.Listen("tcp", idlePort)
	if err != nil {
		t.Fatalf("%s still bound after CloseKept: %v", idlePort, err)
	}
	l.Close()
	if l, err := net.Listen("tcp", busyPort); err == nil {
		l.Close()
		t.Errorf("CloseKept closed the socket of a stream still open (%s)", busyPort)
	}
}
