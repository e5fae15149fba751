package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os/exec"
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
		UniqueID: "scan-42", Number: 42, Armed: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC),
		Width: testW, Height: testH, ElemSize: 4, Compression: "bslz4", Images: frames,
		PixelSize: 55e-6, Energy: 12000, Saturation: 1<<24 - 1, Description: "Pi-mega",
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
	if err := sock.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	return sock
}

// decoded is a message decoded with fxamacker/cbor, tags kept.
type decoded map[string]any

func decode(t *testing.T, b []byte) decoded {
	t.Helper()
	if !bytes.HasPrefix(b[1:], []byte("\x64type")) && !bytes.HasPrefix(b[2:], []byte("\x64type")) {
		t.Errorf("message does not begin with the key type: % x", b[:8])
	}
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

// tag returns v as a tag of number n, failing the test otherwise.
func tag(t *testing.T, v any, n uint64) any {
	t.Helper()
	tg, ok := v.(cbor.Tag)
	if !ok || tg.Number != n {
		t.Fatalf("%T %v, want tag %d", v, v, n)
	}
	return tg.Content
}

func TestStreamMessages(t *testing.T) {
	const frames = 10
	codec, err := compress.New("bslz4", 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A queue as long as the scan: here every image must arrive.
	st, err := Open(Config{Address: anyPort, Queue: frames, SendTimeout: 5 * time.Second}, testSeries(frames), codec.Bound(testW*testH*4))
	if err != nil {
		t.Fatal(err)
	}
	sock := pull(t, st.Endpoint())
	defer sock.Close()
	mem := feed(t, st, codec, frames)
	stats, err := st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if stats.Sent != frames || stats.Dropped != 0 || stats.Thinned != 0 {
		t.Errorf("stats %+v, want %d sent", stats, frames)
	}

	recv := func() decoded {
		b, err := sock.RecvBytes(0)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		return decode(t, b)
	}
	start := recv()
	if start["type"] != "start" || start["series_unique_id"] != "scan-42" || start["series_id"] != uint64(42) ||
		start["image_size_x"] != uint64(testW) || start["image_size_y"] != uint64(testH) || start["number_of_images"] != uint64(frames) {
		t.Errorf("start message %v", start)
	}
	if d, ok := start["arm_date"].(time.Time); !ok || !d.Equal(testSeries(0).Armed) { // tag 0, decoded
		t.Errorf("arm_date %T %v", start["arm_date"], start["arm_date"])
	}
	if ud := start["user_data"].(map[any]any); ud["sample"] != "gold" {
		t.Errorf("start user_data %v", ud)
	}
	for n := range frames {
		m := recv()
		if m["type"] != "image" || m["image_id"] != uint64(n) || m["series_unique_id"] != "scan-42" {
			t.Fatalf("image %d: %v", n, m)
		}
		ch := m["data"].(map[any]any)[channel]
		md := tag(t, ch, tagMultiDim).([]any)
		if dims := md[0].([]any); dims[0] != uint64(testH) || dims[1] != uint64(testW) {
			t.Errorf("image %d: dimensions %v, want [%d %d]", n, dims, testH, testW)
		}
		comp := tag(t, tag(t, md[1], tagUint32LE), tagCompressed).([]any)
		if comp[0] != "bslz4" || comp[1] != uint64(4) {
			t.Errorf("image %d: compression %v %v", n, comp[0], comp[1])
		}
		chunk := comp[2].([]byte)
		if !bytes.Equal(chunk, mem.chunks[n]) {
			t.Errorf("image %d: the stream's chunk is not the file's", n)
		}
		img, err := codec.Decode(nil, chunk)
		if err != nil || !bytes.Equal(img, testImage(n)) {
			t.Errorf("image %d: does not decode to the image (%v)", n, err)
		}
		ud := m["user_data"].(map[any]any)
		if ud["data_crc32c"] != uint64(mem.records[n].DataCRC) || ud["status"] != uint64(0) ||
			ud["image_key"] != uint64(n%3) || ud["rotation_angle"] != float64(n)*1.5 {
			t.Errorf("image %d: user_data %v", n, ud)
		}
		if r := m["start_time"].([]any); r[0] != uint64(n+1)*1000 || r[1] != uint64(time.Second) {
			t.Errorf("image %d: start_time %v", n, r)
		}
	}
	end := recv()
	if end["type"] != "end" || end["series_unique_id"] != "scan-42" {
		t.Errorf("end message %v", end)
	}
	if ud := end["user_data"].(map[any]any); ud["images_sent"] != uint64(frames) || ud["images_dropped"] != uint64(0) {
		t.Errorf("end user_data %v", ud)
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
			st, err := Open(tc.cfg, testSeries(20), codec.Bound(testW*testH*4))
			if err != nil {
				t.Fatal(err)
			}
			sock := pull(t, st.Endpoint())
			defer sock.Close()
			feed(t, st, codec, 20)
			stats, err := st.Close()
			if err != nil {
				t.Fatal(err)
			}
			if stats.Sent != tc.sent || stats.Thinned != tc.thin || stats.Dropped != 0 {
				t.Errorf("stats %+v, want %d sent, %d thinned", stats, tc.sent, tc.thin)
			}
		})
	}
}

// TestNoConsumerNeverHoldsTheScan offers a scan's images to a stream that
// nobody reads: every chunk still reaches the file, the images the stream
// could not send are counted dropped, and Close returns within its budget.
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
	if err == nil {
		t.Error("no error for an end message nobody took")
	}
	if len(mem.chunks) != frames || len(mem.records) != frames {
		t.Errorf("the file got %d chunks and %d records of %d", len(mem.chunks), len(mem.records), frames)
	}
	if stats.Sent != 0 || stats.Dropped != frames {
		t.Errorf("stats %+v, want all %d dropped", stats, frames)
	}
	// 200 sends of 50 ms would take 10 s: the scan waited for none.
	if fed > 2*time.Second {
		t.Errorf("feeding %d frames took %v", frames, fed)
	}
	if closed > closeBudget+2*time.Second {
		t.Errorf("Close took %v", closed)
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

type discard struct{}

func (discard) WriteChunk(int, []byte) error      { return nil }
func (discard) SetRecord(int, frame.Record) error { return nil }

func TestOpenRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg Config
		s   Series
	}{
		"no address":   {Config{}, testSeries(1)},
		"bszstd":       {Config{Address: anyPort}, func() Series { s := testSeries(1); s.Compression = "bszstd"; return s }()},
		"8-byte pixel": {Config{Address: anyPort}, func() Series { s := testSeries(1); s.ElemSize = 8; return s }()},
		"bad endpoint": {Config{Address: "tcp://no-such-host.invalid:1"}, testSeries(1)},
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
			RecordCRC      uint32 `json:"record_crc"`
			NumberOfImages int    `json:"number_of_images"`
			SeriesUniqueID string `json:"series_unique_id"`
		}
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", lines.Text(), err)
		}
		if m.FirstKey != "type" {
			t.Errorf("%s message's first key is %q", m.Type, m.FirstKey)
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
