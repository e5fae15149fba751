// Package stream sends a scan's images to online analysis while the scan
// is written, in the DECTRIS Stream V2 format: one CBOR message per start
// of series, image and end of series, each beginning with the
// self-described CBOR tag, pushed on a ZeroMQ PUSH socket (libzmq through
// github.com/pebbe/zmq4) that consumers PULL from. The messages are those
// DECTRIS's reference parser (stream_v2/examples/stream2.c) reads.
//
// An image message carries the very chunk written to the file: a
// bitshuffle-LZ4 chunk goes out as CBOR tag 56500 ["bslz4", element size,
// chunk], an LZ4 chunk as ["lz4", 0, chunk], an uncompressed one as the
// plain bytes; nothing is compressed twice. Its user_data holds what the
// file's records and plan hold: frame status, CRC-32C of the payload and
// of the image, image key and rotation angle. Images go out in image_id
// order (see order), whatever order compression finishes them in.
//
// A stream may instead carry images a processor stage makes from the
// scan's frames (Series.Float, WriteFrame): float32 pixels as the RFC 8746
// typed array of tag 85, in a series of their own on a socket of their
// own, so that neither the scan's series nor its consumers change.
//
// The stream never holds the scan back. Its Sink copies each chunk into
// one of a fixed set of buffers (their bytes bounded by Config.MaxBytes),
// the only copy the stream makes: the image message is built around the
// chunk in that buffer. (ZeroMQ copies the message once more as it takes
// it.) The buffer is queued for a goroutine that owns the socket; an image that finds
// every buffer taken (a consumer slower than the scan, or none at all) is
// dropped from the stream, never from the file, and counted. Thinning for
// previews (every Nth image, at most N images a second) is applied before
// the copy. At the end of the scan the stream waits up to Config.Linger
// for a connected consumer to take what is queued and the end message,
// and says what it could not deliver.
//
// A socket bound to a port of its own stays bound once its stream is
// closed, for the next stream of the same address: a consumer stays
// connected from one scan's series to the next, as to a detector, and
// misses neither a series nor its first images.
package stream

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"h5ingest/frame"
	"h5ingest/pipeline"
)

// Config says where and how a scan's stream is sent.
type Config struct {
	// Address is the ZeroMQ endpoint the PUSH socket binds, such as
	// tcp://127.0.0.1:31001, the Stream V2 port.
	Address string
	// Queue is how many images may wait to be put in order and sent;
	// each holds a buffer of the chunk's largest size. 0 means
	// DefaultQueue.
	Queue int
	// MaxBytes bounds the buffers: Queue times the largest chunk must
	// not exceed it. 0 means DefaultMaxBytes.
	MaxBytes int64
	// Every sends every Nth image of the scan (by index); 0 or 1 sends
	// each.
	Every int
	// MaxRate sends at most this many images a second; 0 means no limit.
	MaxRate float64
	// SendTimeout bounds how long one message may wait for a consumer
	// while the scan runs before it is dropped; 0 means
	// DefaultSendTimeout.
	SendTimeout time.Duration
	// Linger bounds how long, once the scan has ended, the stream waits
	// for a connected consumer to take the images still queued and the
	// end message; 0 means DefaultLinger.
	Linger time.Duration
}

// Defaults of Config.
const (
	DefaultQueue       = 8
	DefaultMaxBytes    = 1 << 30
	DefaultSendTimeout = 500 * time.Millisecond
	DefaultLinger      = 2 * time.Second
)

// Series describes the scan whose images are streamed: the start
// message's fields and what each image message needs. A zero value
// means "not known": its field is left out of the start message.
type Series struct {
	ScanID   string    // the scan id, the start of series_unique_id
	Armed    time.Time // arm_date, and each image's series_date
	Width    int       // image_size_x, pixels
	Height   int       // image_size_y, pixels
	ElemSize int       // bytes per pixel: 1, 2 or 4 (image_dtype)
	// Float says the pixels are IEEE 754 floats (image_dtype float32,
	// typed array tag 85), not unsigned integers; ElemSize is then 4 and
	// Compression "". Such a series is fed by WriteFrame, not a Sink.
	Float bool
	// Flatfield says the images are flat-field corrected
	// (flatfield_enabled in the start message).
	Flatfield bool
	// Compression is the chunks' Stream V2 compression, as their codec's
	// registry entry says (registry.Codec.Stream): "bslz4" or "lz4",
	// tagged as compressed arrays, or "" for the pixels as they are.
	Compression string
	Images      int     // number_of_images; 0 when the scan's length is unknown
	PixelSize   float64 // pixel_size_x and _y, metres
	Energy      float64 // incident_energy, eV (and incident_wavelength)
	Saturation  uint64  // saturation_value: the largest count a pixel holds
	Description string  // detector_description
	// CountTime and FrameTime are count_time and frame_time, seconds.
	// CountTime is also each image's real_time, and its stop_time less
	// its start_time.
	CountTime, FrameTime float64
	// BeamCenter is beam_center_x and _y, pixels; nil when not known.
	BeamCenter      []float64
	Distance        float64 // sample-detector distance, metres: detector_translation [0, 0, d]
	SensorMaterial  string  // sensor_material
	SensorThickness float64 // sensor_thickness, metres
	Threshold       float64 // threshold_energy of the channel, eV
	SerialNumber    string  // detector_serial_number
	// Rotation is the goniometer's rotation axis of a rotation plan
	// (omega); nil without one.
	Rotation *Axis
	// ImageKeys and Angles are the plan's image key (0 projection, 1 flat,
	// 2 dark) and rotation angle (degrees) of each image, by index; nil
	// without a plan.
	ImageKeys []uint8
	Angles    []float64
	// UserData goes into the start message's user_data.
	UserData map[string]any
}

// Axis is a goniometer axis: its angle at the first image and its step
// per image, degrees.
type Axis struct{ Start, Increment float64 }

// Stats counts what a stream did with the images it was offered, and
// whether its end message went out.
type Stats struct {
	// Sent are the images ZeroMQ took for a connected consumer: a
	// consumer that stays connected and reads gets every one (several
	// consumers share them, each image going to one). Where the socket
	// closes with the stream (a port ZeroMQ chose) and the consumer had
	// not taken the end, the image ZeroMQ still held is not counted.
	Sent uint64
	// Dropped are the images left out of the stream (never of the file),
	// the sum of NoConsumer, Slow, OutOfOrder and Undelivered.
	Dropped     uint64
	NoConsumer  uint64 // no consumer was connected
	Slow        uint64 // a consumer was connected but slower than the scan: no buffer was free, or it did not take the image in time
	OutOfOrder  uint64 // it came after the window had passed its image_id
	Undelivered uint64 // still queued when the linger after the scan ran out
	Thinned     uint64 // left out by Every or MaxRate
	// Gaps are the image_ids the order window passed without their
	// frame having come: missing frames, or frames it could not wait for.
	Gaps uint64
	// EndDelivered says that a connected consumer's connection took the
	// end message from ZeroMQ within the linger, after every image sent;
	// Close's error says why it did not.
	EndDelivered bool
}

// Stream is one scan's stream. Its Sink is called from the pipeline's
// writing goroutine; Stats from any; Close once, after the scan.
type Stream struct {
	cfg      Config
	series   Series
	uniqueID string // series_unique_id
	number   uint64 // series_id
	exposure uint64 // count time in clock ticks; 0 unknown
	endpoint string // the socket's endpoint, the port chosen
	armDate  string // series_date of every image, RFC 3339

	net *sender // the socket, owned by the sending goroutine

	// headRoom is the bytes before the chunk in each image's buffer,
	// enough for every field of its message before the chunk; maxChunk
	// the chunk bytes after them.
	headRoom, maxChunk int
	head               []byte // the sender's: the head of the message being built

	free  chan *image // buffers not in use
	queue chan *image // images in order, to send
	done  chan struct{}

	// The sink's goroutine's own.
	order    *order
	pending  *image    // the chunk of the frame whose record is next
	last     time.Time // when the last image was taken, for MaxRate
	anchored bool
	anchor   int64 // the detector clock at series_date, ns

	sent, noConsumer, slow, late, undelivered, thinned, gaps atomic.Uint64
	deadline                                                 atomic.Int64 // once Close is called: when the linger ends, Unix ns
	endDelivered                                             atomic.Bool

	// wmu serialises WriteFrame's callers, and Close with them.
	wmu     sync.Mutex
	closing bool // Close has begun: WriteFrame refuses

	closeOnce sync.Once
	closeErr  error
}

// image is one queued image: its chunk, copied into the middle of its
// buffer, where the sender writes the rest of its message around it, and
// its record.
type image struct {
	n        int
	buf      []byte // headRoom bytes, the chunk, then room for the message's tail
	size     int    // the chunk's bytes, at buf[headRoom:]
	record   frame.Record
	recorded bool   // record is the frame's record in the file
	start    uint64 // start_time: the detector clock since series_date, ns
}

// tailRoom bounds the bytes of an image message after its chunk (its
// user_data).
const tailRoom = 160

// newImage returns an image whose buffer holds a chunk of maxChunk bytes
// and the message around it.
func (s *Stream) newImage(maxChunk int) *image {
	return &image{buf: make([]byte, s.headRoom+maxChunk+tailRoom)}
}

// fill copies data into img's buffer as its chunk, growing the buffer
// only for a chunk larger than the codec's bound.
func (s *Stream) fill(img *image, n int, data []byte) {
	if need := s.headRoom + len(data) + tailRoom; len(img.buf) < need {
		img.buf = make([]byte, need)
	}
	img.n, img.size = n, copy(img.buf[s.headRoom:], data)
}

// Open checks the buffers' bytes, binds the socket and starts sending.
// maxChunk is the largest chunk the scan's codec writes. The start
// message goes out once a consumer is connected, before the first image.
func Open(cfg Config, s Series, maxChunk int) (*Stream, error) {
	if cfg.Address == "" {
		return nil, errors.New("stream: no address")
	}
	switch s.Compression {
	case "", "bslz4", "lz4":
	default:
		return nil, fmt.Errorf("stream: compression %q has no Stream V2 encoding here (bslz4, lz4, or the pixels as they are)", s.Compression)
	}
	if _, ok := typedArrayTag(s.ElemSize, s.Float); !ok {
		if s.Float {
			return nil, fmt.Errorf("stream: %d-byte float pixels have no Stream V2 typed array here (4, float32)", s.ElemSize)
		}
		return nil, fmt.Errorf("stream: %d-byte pixels have no Stream V2 typed array here (1, 2 or 4)", s.ElemSize)
	}
	if s.Float && s.Compression != "" {
		return nil, fmt.Errorf("stream: float pixels are sent as they are, not compressed with %s", s.Compression)
	}
	if s.BeamCenter != nil && len(s.BeamCenter) != 2 {
		return nil, fmt.Errorf("stream: a beam centre of %d values, want x and y", len(s.BeamCenter))
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if cfg.Linger <= 0 {
		cfg.Linger = DefaultLinger
	}
	if err := CheckBytes(cfg.Queue, maxChunk, cfg.MaxBytes); err != nil {
		return nil, err
	}
	net, err := take(cfg.Address)
	if err != nil {
		return nil, err
	}
	st := &Stream{
		cfg: cfg, series: s, endpoint: net.endpoint,
		number:  nextSeries(cfg.Address),
		armDate: s.Armed.UTC().Format(time.RFC3339Nano),
		net:     net,
		free:    make(chan *image, cfg.Queue),
		queue:   make(chan *image, cfg.Queue),
		done:    make(chan struct{}),
	}
	if s.CountTime > 0 {
		st.exposure = uint64(math.Round(s.CountTime * float64(clockRate)))
	}
	st.uniqueID = uniqueID(s.ScanID, s.Armed, net.endpoint)
	start, err := startMessage(&st.series, st.uniqueID, st.number)
	if err != nil {
		net.release(0)
		return nil, err
	}
	st.sizeHead(maxChunk)
	for range cfg.Queue {
		st.free <- st.newImage(maxChunk)
	}
	st.order = newOrder(st.queue, st.free, &st.gaps, &st.late)
	go st.send(start)
	return st, nil
}

// CheckBytes reports whether queue buffers of chunk bytes each fit in
// limit, naming the profile keys that set them.
func CheckBytes(queue, chunk int, limit int64) error {
	if total := int64(queue) * int64(chunk); total > limit {
		return fmt.Errorf("keys stream.queue and stream.max_bytes: %d images of up to %d bytes take %d bytes, more than the %d allowed: lower stream.queue or raise stream.max_bytes",
			queue, chunk, total, limit)
	}
	return nil
}

// seriesCount counts the series each address has sent, for series_id.
var seriesCount = struct {
	sync.Mutex
	n map[string]uint64
}{n: map[string]uint64{}}

// nextSeries returns the number of the next series sent on address:
// 1, 2, ... for the life of the process, the service.
func nextSeries(address string) uint64 {
	seriesCount.Lock()
	defer seriesCount.Unlock()
	seriesCount.n[address]++
	return seriesCount.n[address]
}

// hostName names the machine in series_unique_id.
var hostName = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
})

// uniqueID returns series_unique_id: the scan id, the arm time to the
// microsecond and the service (the host and the stream's port), so that
// no two series share one, across days and services.
func uniqueID(scanID string, armed time.Time, endpoint string) string {
	port := endpoint[strings.LastIndexByte(endpoint, ':')+1:]
	return fmt.Sprintf("%s-%s-%s-%s", scanID, armed.UTC().Format("20060102T150405.000000Z"), hostName(), port)
}

// Endpoint returns the endpoint the socket is bound to, with the port
// ZeroMQ chose where the address asked for any (tcp://127.0.0.1:*).
func (s *Stream) Endpoint() string { return s.endpoint }

// UniqueID returns the series' series_unique_id.
func (s *Stream) UniqueID() string { return s.uniqueID }

// Stats returns what the stream did so far.
func (s *Stream) Stats() Stats {
	st := Stats{
		Sent: s.sent.Load(), NoConsumer: s.noConsumer.Load(), Slow: s.slow.Load(), OutOfOrder: s.late.Load(),
		Undelivered: s.undelivered.Load(), Thinned: s.thinned.Load(), Gaps: s.gaps.Load(), EndDelivered: s.endDelivered.Load(),
	}
	st.Dropped = st.NoConsumer + st.Slow + st.OutOfOrder + st.Undelivered
	return st
}

// Sink returns sink with every chunk it stores offered to the stream: a
// frame's image is queued once its record is stored, and only frames
// written to the file are streamed. It adds no wait to the scan.
func (s *Stream) Sink(sink pipeline.Sink) pipeline.Sink { return &tap{sink, s} }

type tap struct {
	pipeline.Sink
	s *Stream
}

func (t *tap) WriteChunk(n int, chunk []byte) error {
	if err := t.Sink.WriteChunk(n, chunk); err != nil {
		return err
	}
	t.s.offer(n, chunk)
	return nil
}

func (t *tap) SetRecord(n int, r frame.Record) error {
	err := t.Sink.SetRecord(n, r)
	s := t.s
	now := time.Now()
	p := s.pending
	if p == nil || p.n != n || err != nil { // no image: missing, rejected, left out, or not stored
		if p != nil && p.n == n {
			s.pending = nil
			s.free <- p
		}
		s.order.put(n, nil, now)
		return err
	}
	s.pending = nil
	p.record, p.recorded = r, true
	p.start = s.clock(r.Timestamp, now)
	s.order.put(n, p, now)
	return nil
}

// clock returns the detector timestamp ts (ns) as the time since
// series_date. The first image anchors the detector's clock to the
// host's: its offset is the time from the arm to its arrival; every
// later image follows the detector's clock from there.
func (s *Stream) clock(ts uint64, now time.Time) uint64 {
	if !s.anchored {
		s.anchored = true
		s.anchor = int64(ts) - now.Sub(s.series.Armed).Nanoseconds()
	}
	return uint64(max(int64(ts)-s.anchor, 0))
}

// offer copies frame n's chunk into a free buffer, unless thinning leaves
// it out or no buffer is free.
func (s *Stream) offer(n int, chunk []byte) {
	now := time.Now()
	if p := s.pending; p != nil { // a chunk whose record never came
		s.pending = nil
		s.free <- p
		s.order.put(p.n, nil, now)
	}
	if s.thin(n, now) {
		s.order.put(n, nil, now)
		return
	}
	select {
	case p := <-s.free:
		s.fill(p, n, chunk)
		s.pending = p
	default:
		// The window's images go out, so that buffers come back.
		s.order.skipGap(now)
		s.leftOut()
		s.order.put(n, nil, now)
	}
}

// thin reports whether Every or MaxRate leave image n out, and counts it.
func (s *Stream) thin(n int, now time.Time) bool {
	if s.cfg.Every > 1 && n%s.cfg.Every != 0 {
		s.thinned.Add(1)
		return true
	}
	if s.cfg.MaxRate > 0 {
		if !s.last.IsZero() && now.Sub(s.last).Seconds() < 1/s.cfg.MaxRate {
			s.thinned.Add(1)
			return true
		}
		s.last = now
	}
	return false
}

// WriteFrame streams data, the Width x Height pixels of a series of Float
// pixels, as image n (pipeline.FrameWriter): a processor stage's result
// for the scan's frame n, with the plan's image key and rotation angle of
// frame n in its user_data. Images go out in image_id order, as a Sink's
// do: the stage says which frames have no image with Skip, so that the
// stream need not wait for them. Like a Sink it never waits: data is
// copied into a free buffer, or left out of the stream and counted where
// none is free, or thinned. It is safe for concurrent use, keeps no
// reference to data and allocates nothing; after Close it returns an
// error.
func (s *Stream) WriteFrame(n int, data []byte) error {
	se := &s.series
	switch want := se.Width * se.Height * se.ElemSize; {
	case !se.Float:
		return fmt.Errorf("stream %s: image %d: a series of the scan's chunks is fed by its sink", s.endpoint, n)
	case len(data) != want:
		return fmt.Errorf("stream %s: image %d of %d bytes, want %d x %d pixels of %d bytes", s.endpoint, n, len(data), se.Width, se.Height, se.ElemSize)
	case n < 0:
		return fmt.Errorf("stream %s: image %d: a negative image_id", s.endpoint, n)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closing {
		return fmt.Errorf("stream %s: image %d after the stream was closed", s.endpoint, n)
	}
	now := time.Now()
	if s.thin(n, now) {
		s.order.put(n, nil, now)
		return nil
	}
	select {
	case p := <-s.free:
		s.fill(p, n, data)
		p.recorded = false
		p.start = uint64(max(now.Sub(se.Armed), 0))
		s.order.put(n, p, now)
	default:
		s.order.skipGap(now)
		s.leftOut()
		s.order.put(n, nil, now)
	}
	return nil
}

// Skip says that image n of a series fed by WriteFrame has no image (the
// stage makes none of frame n), so that the images after it need not wait
// for it. It is safe for concurrent use; after Close it does nothing.
func (s *Stream) Skip(n int) {
	if n < 0 {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if !s.closing {
		s.order.put(n, nil, time.Now())
	}
}

// leftOut counts an image left out for want of a consumer to take it.
func (s *Stream) leftOut() {
	if s.net.consumers() == 0 {
		s.noConsumer.Add(1)
	} else {
		s.slow.Add(1)
	}
}

// Close puts the images the window still holds in the queue, waits up
// to the linger for a connected consumer to take them and the end
// message (the rest is dropped and counted), gives the socket back (kept
// bound for the address's next stream, or closed) and every buffer. Its error says why the end message was not
// delivered: no consumer, or one that did not take it in time.
func (s *Stream) Close() (Stats, error) {
	s.closeOnce.Do(func() {
		s.wmu.Lock()
		s.closing = true
		s.wmu.Unlock()
		now := time.Now()
		if p := s.pending; p != nil {
			s.pending = nil
			s.free <- p
		}
		s.order.finish(now)
		s.deadline.Store(now.Add(s.cfg.Linger).UnixNano())
		close(s.queue)
		<-s.done
		// A stream's counts outlive it (in metrics, in a service's
		// history of scans); its buffers do not.
		for len(s.free) > 0 {
			<-s.free
		}
		s.order = nil
		s.series.ImageKeys, s.series.Angles, s.series.UserData = nil, nil, nil
	})
	return s.Stats(), s.closeErr
}
