package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	zmq "github.com/pebbe/zmq4"

	"h5ingest/compress"
	"h5ingest/frame"
)

const (
	testW, testH = 64, 48
	anyPort      = "tcp://127.0.0.1:*"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// testImage returns frame n's image: sparse counts, as a detector's.
func testImage(n int) []byte {
	b := make([]byte, testW*testH*4)
	for i := 0; i < testW*testH; i += 7 + n%5 {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(i*n+1)&0xffffff)
	}
	return b
}

// memSink keeps what the file would.
type memSink struct {
	chunks  map[int][]byte
	records map[int]frame.Record
}

func newMemSink() *memSink {
	return &memSink{chunks: map[int][]byte{}, records: map[int]frame.Record{}}
}

func (s *memSink) WriteChunk(n int, c []byte) error {
	s.chunks[n] = bytes.Clone(c)
	return nil
}

func (s *memSink) SetRecord(n int, r frame.Record) error { s.records[n] = r; return nil }

func testSeries(frames int) Series {
	s := Series{
		ScanID: "scan-42", Armed: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC),
		Width: testW, Height: testH, ElemSize: 4, Compression: "bslz4", Images: frames,
		PixelSize: 55e-6, Energy: 12000, Saturation: 1<<24 - 1, Description: "Pi-mega",
		CountTime: 0.001, FrameTime: 0.0011, BeamCenter: []float64{31.5, 20.25}, Distance: 0.3,
		SensorMaterial: "CdTe", SensorThickness: 1e-3, Threshold: 6000, SerialNumber: "PM135D-07",
		Rotation: &Axis{Start: 0, Increment: 1.5},
		UserData: map[string]any{"sample": "gold", "h5ingest": "test"},
	}
	for i := range frames {
		s.ImageKeys = append(s.ImageKeys, uint8(i%3))
		s.Angles = append(s.Angles, float64(i)*1.5)
	}
	return s
}

// feed writes frames images through the stream's sink, as the pipeline
// would, and returns the sink behind it.
func feed(t *testing.T, st *Stream, codec compress.Codec, frames int) *memSink {
	t.Helper()
	mem := newMemSink()
	sink := st.Sink(mem)
	var chunk []byte
	for n := range frames {
		img := testImage(n)
		var err error
		if chunk, err = codec.Encode(chunk[:0], img); err != nil {
			t.Fatal(err)
		}
		if err := sink.WriteChunk(n, chunk); err != nil {
			t.Fatal(err)
		}
		r := frame.Record{Timestamp: uint64(n+1) * 1000, RawCRC: 7, DataCRC: crc32.Checksum(img, castagnoli)}
		if err := sink.SetRecord(n, r); err != nil {
			t.Fatal(err)
		}
	}
	return mem
}

// pull connects a consumer to endpoint.
func pull(t *testing.T, endpoint string) *zmq.Socket {
	t.Helper()
	sock, err := zmq.NewSocket(zmq.PULL)
	if err != nil {
		t.Fatal(err)
	}
	sock.SetRcvtimeo(5 * time.Second)
	sock.SetLinger(0)
	if err := sock.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	return sock
}

// connected waits until the stream has seen its consumer connect, as a
// consumer connected before a scan is.
func connected(t *testing.T, st *Stream) {
	t.Helper()
	awaitConsumers(t, st, func(n int) bool { return n > 0 })
}

// awaitConsumers waits until the consumers the stream sees connected
// satisfy ok, failing the test after 10 s.
func awaitConsumers(t *testing.T, st *Stream, ok func(int) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		changed := st.net.change()
		if ok(st.net.consumers()) {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%d consumers connected after 10 s", st.net.consumers())
		}
	}
}

// receive returns the messages sock receives up to and with the end of
// series, or up to its receive timeout.
func receive(t *testing.T, sock *zmq.Socket) [][]byte {
	t.Helper()
	var msgs [][]byte
	for {
		b, err := sock.RecvBytes(0)
		if err != nil {
			t.Errorf("receive after %d messages: %v", len(msgs), err)
			return msgs
		}
		msgs = append(msgs, b)
		if m, err := parseStream2(b); err == nil && m.Type == "end" {
			return msgs
		}
	}
}

// decoded is a message decoded with fxamacker/cbor, tags kept.
type decoded map[string]any

func decode(t *testing.T, b []byte) decoded {
	t.Helper()
	dm, err := cbor.DecOptions{DefaultMapType: nil}.DecMode()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := dm.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return m
}

func TestStreamMessages(t *testing.T) {
	const frames = 10
	codec, err := compress.New("bslz4", 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A queue as long as the scan: here every image must arrive.
	series := testSeries(frames)
	st, err := Open(Config{Address: anyPort, Queue: frames, SendTimeout: 5 * time.Second}, series, codec.Bound(testW*testH*4))
	if err != nil {
		t.Fatal(err)
	}
	sock := pull(t, st.Endpoint())
	defer sock.Close()
	connected(t, st)
	fed := time.Now()
	mem := feed(t, st, codec, frames)
	stats, err := st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if stats.Sent != frames || stats.Dropped != 0 || stats.Thinned != 0 || stats.Gaps != 0 || !stats.EndDelivered {
		t.Errorf("stats %+v, want %d sent and the end delivered", stats, frames)
	}
	raw := receive(t, sock)
	msgs := checkScan(t, raw)
	if len(msgs) != frames+2 {
		t.Fatalf("%d messages, want %d", len(msgs), frames+2)
	}

	// The start: every field the series knows, of the type the parser
	// reads.
	start := msgs[0]
	if !strings.HasPrefix(start.SeriesUniqueID, "scan-42-20261123T120000.000000Z-") || start.SeriesUniqueID != st.UniqueID() || start.SeriesID == 0 ||
		start.ImageSizeX != testW || start.ImageSizeY != testH || start.NumberOfImages != frames || start.ImageDtype != "uint32" {
		t.Errorf("start message %+v", start)
	}
	floats := map[string][2]float64{
		"count_time": {start.CountTime, 0.001}, "frame_time": {start.FrameTime, 0.0011},
		"beam_center_x": {start.BeamCenterX, 31.5}, "beam_center_y": {start.BeamCenterY, 20.25},
		"pixel_size_x": {start.PixelSizeX, 55e-6}, "pixel_size_y": {start.PixelSizeY, 55e-6},
		"incident_energy": {start.IncidentEnergy, 12000}, "incident_wavelength": {start.IncidentWavelength, 12398.419843320026 / 12000},
		"sensor_thickness": {start.SensorThickness, 1e-3},
	}
	for k, v := range floats {
		if !start.has(k) || v[0] != v[1] {
			t.Errorf("start %s = %v (sent: %v), want %v", k, v[0], start.has(k), v[1])
		}
	}
	if start.DetectorTranslation != [3]float64{0, 0, 0.3} || start.SensorMaterial != "CdTe" || start.SerialNumber != "PM135D-07" ||
		start.ThresholdEnergy[channel] != 6000 || len(start.ThresholdEnergy) != 1 || start.SatVal != 1<<24-1 || start.DetectorDescription != "Pi-mega" {
		t.Errorf("start message %+v", start)
	}
	if g, ok := start.Goniometer["omega"]; !ok || g != [2]float64{0, 1.5} || len(start.Goniometer) != 1 {
		t.Errorf("goniometer %v, want omega start 0 increment 1.5", start.Goniometer)
	}
	for _, k := range []string{"countrate_correction_enabled", "flatfield_enabled", "pixel_mask_enabled", "virtual_pixel_interpolation_enabled"} {
		if v, ok := start.Enabled[k]; !ok || v {
			t.Errorf("%s = %v (sent: %v), want false", k, v, ok)
		}
	}
	if d, err := time.Parse(time.RFC3339Nano, start.ArmDate); err != nil || !d.Equal(series.Armed) {
		t.Errorf("arm_date %s", start.ArmDate)
	}
	ud := decode(t, raw[0])["user_data"].(map[any]any)
	if ud["sample"] != "gold" {
		t.Errorf("start user_data %v", ud)
	}

	// The images: the file's chunks, in order, timed by the detector's
	// clock from series_date.
	var first uint64
	for n := range frames {
		m := msgs[n+1]
		if m.ImageID != uint64(n) || m.SeriesUniqueID != st.UniqueID() {
			t.Fatalf("image %d: %+v", n, m)
		}
		d := m.Data[channel]
		if d.Algorithm != "bslz4" || d.Modifier != 4 || d.OrigSize != testW*testH*4 {
			t.Errorf("image %d: compression %s %d of %d bytes", n, d.Algorithm, d.Modifier, d.OrigSize)
		}
		if !bytes.Equal(d.Data, mem.chunks[n]) {
			t.Errorf("image %d: the stream's chunk is not the file's", n)
		}
		img, err := codec.Decode(nil, d.Data)
		if err != nil || !bytes.Equal(img, testImage(n)) {
			t.Errorf("image %d: does not decode to the image (%v)", n, err)
		}
		// feed's detector clock: (n+1) µs.
		if n == 0 {
			first = m.StartTime[0]
			// The first image's offset is its arrival after the arm
			// (23 November 2026 12:00 in the test's series).
			if since := time.Since(series.Armed); time.Duration(first) < since-time.Since(fed)-time.Second || time.Duration(first) > since+time.Second {
				t.Errorf("image 0: start_time %v after series_date, want about %v", time.Duration(first), since)
			}
		} else if got, want := m.StartTime[0]-first, uint64(n)*1000; got != want {
			t.Errorf("image %d: start_time %d ns after image 0's, want %d (the detector's clock)", n, got, want)
		}
		if m.RealTime != [2]uint64{1_000_000, clockRate} {
			t.Errorf("image %d: real_time %v, want the count time", n, m.RealTime)
		}
		ud := decode(t, raw[n+1])["user_data"].(map[any]any)
		if ud["data_crc32c"] != uint64(mem.records[n].DataCRC) || ud["status"] != uint64(0) ||
			ud["image_key"] != uint64(n%3) || ud["rotation_angle"] != float64(n)*1.5 {
			t.Errorf("image %d: user_data %v", n, ud)
		}
	}
	end := decode(t, raw[len(raw)-1])
	if ud := end["user_data"].(map[any]any); ud["images_sent"] != uint64(frames) || ud["images_dropped"] != uint64(0) {
		t.Errorf("end user_data %v", ud)
	}
}

// TestSeriesNumbers: series_id counts the series of an address, and
// series_unique_id differs between two series of one scan id.
func TestSeriesNumbers(t *testing.T) {
	var ids []string
	var numbers []uint64
	for range 3 {
		st, err := Open(Config{Address: "tcp://127.0.0.1:*"}, testSeries(0), 64)
		if err != nil {
			t.Fatal(err)
		}
		ids, numbers = append(ids, st.UniqueID()), append(numbers, st.number)
		st.Close()
	}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Errorf("series_unique_id repeats: %v", ids)
	}
	if numbers[1] != numbers[0]+1 || numbers[2] != numbers[1]+1 {
		t.Errorf("series_id %v, want counting up", numbers)
	}
}

func TestThinning(t *testing.T) {
	codec, _ := compress.New("none", 4, 0)
	for _, tc := range []struct {
		name       string
		cfg        Config
		sent, thin uint64
	}{
		{"every 4th", Config{Every: 4}, 5, 15},
		{"all", Config{Every: 1}, 20, 0},
		{"at most 1 a second", Config{MaxRate: 1}, 1, 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Address, tc.cfg.Queue = anyPort, 20
			series := testSeries(20)
			series.Compression = "" // the pixels as they are
			st, err := Open(tc.cfg, series, codec.Bound(testW*testH*4))
			if err != nil {
				t.Fatal(err)
			}
			sock := pull(t, st.Endpoint())
			defer sock.Close()
			connected(t, st)
			feed(t, st, codec, 20)
			stats, err := st.Close()
			if err != nil {
				t.Fatal(err)
			}
			if stats.Sent != tc.sent || stats.Thinned != tc.thin || stats.Dropped != 0 || stats.Gaps != 0 {
				t.Errorf("stats %+v, want %d sent, %d thinned", stats, tc.sent, tc.thin)
			}
			if msgs := checkScan(t, receive(t, sock)); uint64(len(msgs)) != tc.sent+2 {
				t.Errorf("%d messages, want %d images, the start and the end", len(msgs), tc.sent)
			} else if tc.cfg.Every > 1 {
				for _, m := range msgs[1 : len(msgs)-1] {
					if m.ImageID%uint64(tc.cfg.Every) != 0 {
						t.Errorf("image %d sent, not a multiple of %d", m.ImageID, tc.cfg.Every)
					}
				}
			}
		})
	}
}

// TestNoConsumerNeverHoldsTheScan offers a scan's images to a stream that
// nobody is connected to: every chunk still reaches the file, the images
// are counted dropped for want of a consumer (not a full queue), Close
// says that no consumer was connected and returns at once.
func TestNoConsumerNeverHoldsTheScan(t *testing.T) {
	const frames = 200
	codec, _ := compress.New("bslz4", 4, 0)
	st, err := Open(Config{Address: anyPort, Queue: 4, SendTimeout: 50 * time.Millisecond}, testSeries(frames), codec.Bound(testW*testH*4))
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	mem := feed(t, st, codec, frames)
	fed := time.Since(begin)
	stats, err := st.Close()
	closed := time.Since(begin) - fed
	if err == nil || !strings.Contains(err.Error(), "no consumer connected") {
		t.Errorf("Close: %v, want no consumer connected", err)
	}
	if len(mem.chunks) != frames || len(mem.records) != frames {
		t.Errorf("the file got %d chunks and %d records of %d", len(mem.chunks), len(mem.records), frames)
	}
	if stats.Sent != 0 || stats.Dropped != frames || stats.NoConsumer != frames || stats.Slow != 0 || stats.EndDelivered {
		t.Errorf("stats %+v, want all %d dropped for no consumer", stats, frames)
	}
	// 200 sends of 50 ms would take 10 s: the scan waited for none.
	if fed > 2*time.Second {
		t.Errorf("feeding %d frames took %v", frames, fed)
	}
	if closed > time.Second {
		t.Errorf("Close took %v with no consumer to wait for", closed)
	}
}

func TestSinkAllocatesNothing(t *testing.T) {
	codec, _ := compress.New("bslz4", 4, 0)
	st, err := Open(Config{Address: anyPort, Queue: 2, SendTimeout: time.Millisecond}, testSeries(0), codec.Bound(testW*testH*4))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sink := st.Sink(discard{})
	chunk, _ := codec.Encode(nil, testImage(3))
	n := 0
	if a := testing.AllocsPerRun(200, func() {
		sink.WriteChunk(n, chunk)
		sink.SetRecord(n, frame.Record{DataCRC: 1})
		n++
	}); a != 0 {
		t.Errorf("%v allocations per frame", a)
	}
}

// TestImageMessageAllocatesNothing: the sender encodes each image into
// the buffer it reuses.
func TestImageMessageAllocatesNothing(t *testing.T) {
	codec, _ := compress.New("bslz4", 4, 0)
	st, err := Open(Config{Address: anyPort, Queue: 1}, testSeries(4), codec.Bound(testW*testH*4))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	chunk, _ := codec.Encode(nil, testImage(3))
	img := st.newImage(codec.Bound(testW * testH * 4))
	st.fill(img, 2, chunk)
	img.record, img.recorded, img.start = frame.Record{DataCRC: 1}, true, 5
	var msg []byte
	if a := testing.AllocsPerRun(100, func() { msg = st.imageMessage(img) }); a != 0 {
		t.Errorf("%v allocations per image message", a)
	}
	m, err := parseStream2(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data[channel].Data, chunk) {
		t.Error("the message's chunk is not the chunk")
	}
}

type discard struct{}

func (discard) WriteChunk(int, []byte) error      { return nil }
func (discard) SetRecord(int, frame.Record) error { return nil }

func TestOpenRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg Config
		s   Series
	}{
		"no address":               {Config{}, testSeries(1)},
		"bszstd":                   {Config{Address: anyPort}, func() Series { s := testSeries(1); s.Compression = "bszstd"; return s }()},
		"8-byte pixel":             {Config{Address: anyPort}, func() Series { s := testSeries(1); s.ElemSize = 8; return s }()},
		"bad endpoint":             {Config{Address: "tcp://no-such-host.invalid:1"}, testSeries(1)},
		"over max_bytes":           {Config{Address: anyPort, Queue: 8, MaxBytes: 8*1024 - 1}, testSeries(1)},
		"beam centre of one value": {Config{Address: anyPort}, func() Series { s := testSeries(1); s.BeamCenter = []float64{1}; return s }()},
	} {
		if st, err := Open(tc.cfg, tc.s, 1024); err == nil {
			st.Close()
			t.Errorf("%s: opened", name)
		}
	}
}

// TestPythonConsumer has the Python consumer of tools/stream, built on
// Debian's zmq, cbor2 and bitshuffle, receive a whole stream: the start,
// every image decoded with its CRC-32C equal to the record's, and the end.
func TestPythonConsumer(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import zmq, cbor2, bitshuffle, crcmod").Run(); err != nil {
		t.Skip("python3-zmq, python3-cbor2, bitshuffle or python3-crcmod missing (make deps installs them)")
	}
	const frames = 12
	codec, _ := compress.New("bslz4", 4, 0)
	st, err := Open(Config{Address: anyPort, Queue: frames, SendTimeout: 5 * time.Second}, testSeries(frames), codec.Bound(testW*testH*4))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "../tools/stream/consume.py", st.Endpoint(), "--timeout", "20")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() { // connected
		t.Fatalf("consumer said nothing: %s", stderr.String())
	}
	connected(t, st)
	mem := feed(t, st, codec, frames)
	if _, err := st.Close(); err != nil {
		t.Error(err)
	}
	var types []string
	images := 0
	for lines.Scan() {
		var m struct {
			Type           string
			FirstKey       string `json:"first_key"`
			ImageID        int    `json:"image_id"`
			Shape          []int
			CRC            uint32
			RecordCRC      uint32   `json:"record_crc"`
			NumberOfImages int      `json:"number_of_images"`
			SeriesUniqueID string   `json:"series_unique_id"`
			SelfDescribed  bool     `json:"self_described"`
			StartTime      []uint64 `json:"start_time"`
			ImageDtype     string   `json:"image_dtype"`
		}
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", lines.Text(), err)
		}
		if m.FirstKey != "type" || !m.SelfDescribed || m.SeriesUniqueID != st.UniqueID() && m.Type != "image" {
			t.Errorf("%s message: first key %q, self-described %v, series %q", m.Type, m.FirstKey, m.SelfDescribed, m.SeriesUniqueID)
		}
		if m.Type == "start" && m.ImageDtype != "uint32" {
			t.Errorf("start: image_dtype %q", m.ImageDtype)
		}
		if m.Type == "image" && (len(m.StartTime) != 2 || m.StartTime[1] != clockRate) {
			t.Errorf("image %d: start_time %v", m.ImageID, m.StartTime)
		}
		types = append(types, m.Type)
		if m.Type == "image" {
			images++
			if m.CRC != mem.records[m.ImageID].DataCRC || m.RecordCRC != m.CRC || len(m.Shape) != 2 || m.Shape[0] != testH || m.Shape[1] != testW {
				t.Errorf("image %d: %s", m.ImageID, lines.Text())
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("consumer: %v\n%s", err, stderr.String())
	}
	if images != frames || types[0] != "start" || types[len(types)-1] != "end" {
		t.Errorf("consumer got %v", types)
	}
}
