// Package stream sends a scan's images to online analysis while the scan
// is written, in the DECTRIS Stream V2 format: one CBOR message per start
// of series, image and end of series, pushed on a ZeroMQ PUSH socket
// (libzmq through github.com/pebbe/zmq4) that consumers PULL from.
//
// An image message carries the very chunk written to the file: a
// bitshuffle-LZ4 chunk goes out as CBOR tag 56500 ["bslz4", element size,
// chunk], an LZ4 chunk as ["lz4", 0, chunk], an uncompressed one as the
// plain bytes; nothing is compressed twice. Its user_data holds what the
// file's records and plan hold: frame status, CRC-32C of the payload and
// of the image, image key and rotation angle.
//
// The stream never holds the scan back. Its Sink copies each chunk into
// one of a fixed set of buffers and queues it for a goroutine that owns
// the socket; an image that finds every buffer taken (a consumer slower
// than the scan, or none at all) is dropped from the stream, never from
// the file, and counted. Thinning for previews (every Nth image, at most
// N images a second) is applied before the copy.
package stream

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fxamacker/cbor/v2"
	zmq "github.com/pebbe/zmq4"

	"h5ingest/frame"
	"h5ingest/pipeline"
)

// Config says where and how a scan's stream is sent.
type Config struct {
	// Address is the ZeroMQ endpoint the PUSH socket binds, such as
	// tcp://127.0.0.1:31001, the Stream V2 port.
	Address string
	// Queue is how many images may wait to be sent; each holds a buffer
	// of the chunk's largest size. 0 means DefaultQueue.
	Queue int
	// Every sends every Nth image of the scan (by index); 0 or 1 sends
	// each.
	Every int
	// MaxRate sends at most this many images a second; 0 means no limit.
	MaxRate float64
	// SendTimeout bounds how long one message may wait for a consumer
	// before it is dropped; 0 means DefaultSendTimeout.
	SendTimeout time.Duration
}

// Defaults of Config.
const (
	DefaultQueue       = 8
	DefaultSendTimeout = 500 * time.Millisecond
	// closeBudget bounds how long Close spends sending what is queued.
	closeBudget = 2 * time.Second
)

// Series describes the scan whose images are streamed: the start
// message's fields and what each image message needs.
type Series struct {
	UniqueID string    // series_unique_id: the scan id
	Number   uint64    // series_id
	Armed    time.Time // arm_date, and each image's series_date
	Width    int       // image_size_x, pixels
	Height   int       // image_size_y, pixels
	ElemSize int       // bytes per pixel: 1, 2 or 4
	// Compression is the chunks' codec: bslz4, lz4 or none.
	Compression string
	Images      int     // number_of_images; 0 when the scan's length is unknown
	PixelSize   float64 // pixel_size_x and _y, metres; 0 when unknown
	Energy      float64 // incident_energy, eV; 0 when unknown
	Saturation  uint64  // saturation_value: the largest count a pixel holds
	Description string  // detector_description
	// ImageKeys and Angles are the plan's image key (0 projection, 1 flat,
	// 2 dark) and rotation angle (degrees) of each image, by index; nil
	// without a plan.
	ImageKeys []uint8
	Angles    []float64
	// UserData goes into the start message's user_data.
	UserData map[string]any
}

// Stats counts what a stream did with the images it was offered.
type Stats struct {
	Sent    uint64 // handed to ZeroMQ
	Dropped uint64 // no free buffer when offered, or no consumer took it in time
	Thinned uint64 // left out by Every or MaxRate
}

// Stream is one scan's stream. Its Sink is called from the pipeline's
// writing goroutine; Stats from any; Close once, after the scan.
type Stream struct {
	cfg      Config
	series   Series
	sock     *zmq.Socket
	endpoint string // the socket's endpoint, the port chosen
	armDate  string // series_date of every image, RFC 3339

	free  chan *image // buffers not in use
	queue chan *image // images to send, in order
	done  chan struct{}

	pending *image    // the chunk of the frame whose record is next
	last    time.Time // when the last image was taken, for MaxRate

	sent, dropped, thinned atomic.Uint64
	ended                  atomic.Bool // Close has queued the end

	closeOnce sync.Once
	closeErr  error
}

// image is one queued image: a copy of its chunk and its record.
type image struct {
	n      int
	chunk  []byte
	record frame.Record
	end    bool // no image: the end of the series
}

// Open binds the socket, queues the start message and starts sending.
// maxChunk is the largest chunk the scan's codec writes.
func Open(cfg Config, s Series, maxChunk int) (*Stream, error) {
	if cfg.Address == "" {
		return nil, errors.New("stream: no address")
	}
	switch s.Compression {
	case "bslz4", "lz4", "none":
	default:
		return nil, fmt.Errorf("stream: compression %s has no Stream V2 encoding (bslz4, lz4 or none)", s.Compression)
	}
	if _, ok := typedArrayTag(s.ElemSize); !ok {
		return nil, fmt.Errorf("stream: %d-byte pixels have no Stream V2 typed array here (1, 2 or 4)", s.ElemSize)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	start, err := startMessage(s)
	if err != nil {
		return nil, err
	}
	sock, err := zmq.NewSocket(zmq.PUSH)
	if err != nil {
		return nil, fmt.Errorf("stream: socket: %w", err)
	}
	// Few messages wait inside ZeroMQ: the queue here is what bounds
	// memory and decides what is dropped.
	for _, set := range []func() error{
		func() error { return sock.SetSndhwm(2) },
		func() error { return sock.SetSndtimeo(cfg.SendTimeout) },
		func() error { return sock.SetLinger(time.Second) },
	} {
		if err := set(); err != nil {
			sock.Close()
			return nil, fmt.Errorf("stream: socket options: %w", err)
		}
	}
	if err := sock.Bind(cfg.Address); err != nil {
		sock.Close()
		return nil, fmt.Errorf("stream: bind %s: %w", cfg.Address, err)
	}
	endpoint, err := sock.GetLastEndpoint()
	if err != nil {
		endpoint = cfg.Address
	}
	st := &Stream{
		cfg: cfg, series: s, sock: sock, endpoint: endpoint,
		armDate: s.Armed.UTC().Format(time.RFC3339Nano),
		free:    make(chan *image, cfg.Queue),
		queue:   make(chan *image, cfg.Queue+1), // and the end
		done:    make(chan struct{}),
	}
	for range cfg.Queue {
		st.free <- &image{chunk: make([]byte, 0, maxChunk)}
	}
	go st.send(start, maxChunk)
	return st, nil
}

// Endpoint returns the endpoint the socket is bound to, with the port
// ZeroMQ chose where the address asked for any (tcp://127.0.0.1:*).
func (s *Stream) Endpoint() string { return s.endpoint }

// Stats returns what the stream did so far.
func (s *Stream) Stats() Stats {
	return Stats{Sent: s.sent.Load(), Dropped: s.dropped.Load(), Thinned: s.thinned.Load()}
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
	if p := s.pending; p != nil && p.n == n {
		s.pending = nil
		if err != nil {
			s.free <- p
			return err
		}
		p.record = r
		s.queue <- p // room for every buffer: never waits
	}
	return err
}

// offer copies frame n's chunk into a free buffer, unless thinning leaves
// it out or no buffer is free.
func (s *Stream) offer(n int, chunk []byte) {
	if p := s.pending; p != nil { // a chunk whose record never came
		s.pending = nil
		s.free <- p
	}
	if s.cfg.Every > 1 && n%s.cfg.Every != 0 {
		s.thinned.Add(1)
		return
	}
	if s.cfg.MaxRate > 0 {
		now := time.Now()
		if !s.last.IsZero() && now.Sub(s.last).Seconds() < 1/s.cfg.MaxRate {
			s.thinned.Add(1)
			return
		}
		s.last = now
	}
	select {
	case p := <-s.free:
		p.n, p.chunk = n, append(p.chunk[:0], chunk...)
		s.pending = p
	default:
		s.dropped.Add(1)
	}
}

// send runs on its own goroutine, the only one that uses the socket: it
// sends the start message, every queued image and the end message.
func (s *Stream) send(start []byte, maxChunk int) {
	defer close(s.done)
	msg := make([]byte, 0, maxChunk+imageOverhead)
	// A consumer that connects later misses the start, as with any PUSH
	// stream; one that is not reading makes the send time out.
	_, err := s.sock.SendBytes(start, 0)
	stalled := err != nil  // the last send found no consumer reading
	var deadline time.Time // once Close is waiting: when it stops waiting
	for img := range s.queue {
		if img.end {
			s.closeErr = s.sendEnd(stalled)
			return
		}
		if deadline.IsZero() && s.ended.Load() {
			deadline = time.Now().Add(closeBudget)
		}
		// Once the scan has ended, a consumer that is not reading gets
		// no more waits: what is queued is dropped at once.
		if !deadline.IsZero() && (stalled || time.Now().After(deadline)) {
			s.dropped.Add(1)
		} else {
			msg = s.imageMessage(msg[:0], img)
			if err := s.sendMessage(msg); err != nil {
				s.dropped.Add(1) // no consumer took it in time
				stalled = true
			} else {
				s.sent.Add(1)
				stalled = false
			}
		}
		s.free <- img
	}
}

// endPatience is how long, once the scan has ended, a message may wait for
// a consumer before the consumer counts as stalled: one that reads takes a
// chunk in far less.
const endPatience = 50 * time.Millisecond

// sendMessage sends msg, waiting up to the send timeout for a consumer to
// take it; once the scan has ended, up to endPatience. It polls rather
// than blocking in ZeroMQ, so that the end of the scan cuts a wait short.
func (s *Stream) sendMessage(msg []byte) error {
	start := time.Now()
	for {
		_, err := s.sock.SendBytes(msg, zmq.DONTWAIT)
		if err == nil || zmq.AsErrno(err) != zmq.Errno(syscall.EAGAIN) {
			return err
		}
		waited := time.Since(start)
		if waited >= s.cfg.SendTimeout || s.ended.Load() && waited >= endPatience {
			return err
		}
		time.Sleep(sendPoll)
	}
}

// sendPoll is how often a message waiting for a consumer is offered again.
const sendPoll = 2 * time.Millisecond

// sendEnd sends the end of the series with the counts. To a consumer that
// is not reading it gets one short try, and the socket does not linger on
// close, so that the scan's end does not wait on it.
func (s *Stream) sendEnd(stalled bool) error {
	end, err := endMessage(s.series, s.Stats())
	if err != nil {
		return err
	}
	if stalled {
		s.sock.SetSndtimeo(stalledEndTimeout)
		s.sock.SetLinger(0)
	}
	_, err = s.sock.SendBytes(end, 0)
	return err
}

// stalledEndTimeout is how long the end of series waits for a consumer
// that stopped reading.
const stalledEndTimeout = 50 * time.Millisecond

// Close queues the end of the series, waits for what is queued to be sent
// (at most a few seconds, then the rest is dropped and counted), sends the
// end message with the counts, and closes the socket.
func (s *Stream) Close() (Stats, error) {
	s.closeOnce.Do(func() {
		if p := s.pending; p != nil {
			s.pending = nil
			s.free <- p
		}
		s.ended.Store(true)
		s.queue <- &image{end: true}
		close(s.queue)
		<-s.done
		if err := s.sock.Close(); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
		switch {
		case zmq.AsErrno(s.closeErr) == zmq.Errno(syscall.EAGAIN):
			s.closeErr = fmt.Errorf("stream %s: the end of series found no consumer reading", s.endpoint)
		case s.closeErr != nil:
			s.closeErr = fmt.Errorf("stream %s: end of series: %w", s.endpoint, s.closeErr)
		}
	})
	return s.Stats(), s.closeErr
}

// startMessage encodes the start of the series.
func startMessage(s Series) ([]byte, error) {
	m := map[string]any{
		"type":                 "start",
		"series_id":            s.Number,
		"series_unique_id":     s.UniqueID,
		"arm_date":             cbor.Tag{Number: tagDateTime, Content: s.Armed.UTC().Format(time.RFC3339Nano)},
		"channels":             []string{channel},
		"image_size_x":         uint64(s.Width),
		"image_size_y":         uint64(s.Height),
		"number_of_images":     uint64(s.Images),
		"detector_description": s.Description,
	}
	if s.PixelSize > 0 {
		m["pixel_size_x"], m["pixel_size_y"] = s.PixelSize, s.PixelSize
	}
	if s.Energy > 0 {
		m["incident_energy"] = s.Energy
	}
	if s.Saturation > 0 {
		m["saturation_value"] = s.Saturation
	}
	if s.UserData != nil {
		m["user_data"] = s.UserData
	}
	return encodeTypeFirst(m)
}

// endMessage encodes the end of the series, with the stream's counts in
// its user_data.
func endMessage(s Series, st Stats) ([]byte, error) {
	return encodeTypeFirst(map[string]any{
		"type":             "end",
		"series_id":        s.Number,
		"series_unique_id": s.UniqueID,
		"user_data": map[string]any{
			"images_sent": st.Sent, "images_dropped": st.Dropped, "images_thinned": st.Thinned,
		},
	})
}

// canonical encodes the start and end messages' fields in CBOR's
// canonical order.
var canonical = func() cbor.EncMode {
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		panic(err) // the library's own options
	}
	return em
}()

// encodeTypeFirst encodes m as a CBOR map whose first key is "type", as
// Stream V2 asks of every message; the other keys follow in CBOR's
// canonical order.
func encodeTypeFirst(m map[string]any) ([]byte, error) {
	typ := m["type"].(string)
	delete(m, "type")
	rest, err := canonical.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("stream: encode %s message: %w", typ, err)
	}
	// rest is a map head then its pairs: write a head one larger, the
	// type, then the pairs.
	var n uint64
	body := rest[1:]
	switch info := rest[0] & 0x1f; {
	case info < 24:
		n = uint64(info)
	case info == 24:
		n, body = uint64(rest[1]), rest[2:]
	default:
		return nil, fmt.Errorf("stream: %s message of %d fields", typ, len(m))
	}
	b := appendHead(nil, majorMap, n+1)
	b = appendText(appendText(b, "type"), typ)
	return append(b, body...), nil
}

// channel is the one channel of a Pi-mega image: its single threshold.
const channel = "threshold_1"

// imageOverhead bounds the bytes of an image message besides its chunk.
const imageOverhead = 512

// typedArrayTag returns the RFC 8746 typed array tag of little-endian
// unsigned pixels of size bytes.
func typedArrayTag(size int) (uint64, bool) {
	switch size {
	case 1:
		return tagUint8, true
	case 2:
		return tagUint16LE, true
	case 4:
		return tagUint32LE, true
	}
	return 0, false
}

// imageMessage appends the image message of img to b.
func (s *Stream) imageMessage(b []byte, img *image) []byte {
	se := &s.series
	fields := uint64(7) // type, series_id, series_unique_id, image_id, series_date, data, user_data
	if img.record.Timestamp != 0 {
		fields++ // start_time
	}
	b = appendHead(b, majorMap, fields)
	b = appendText(appendText(b, "type"), "image")
	b = appendUint(appendText(b, "series_id"), se.Number)
	b = appendText(appendText(b, "series_unique_id"), se.UniqueID)
	b = appendUint(appendText(b, "image_id"), uint64(img.n))
	b = appendText(appendHead(appendText(b, "series_date"), majorTag, tagDateTime), s.armDate)
	if ts := img.record.Timestamp; ts != 0 {
		b = appendRational(appendText(b, "start_time"), ts, uint64(time.Second))
	}
	// data: {channel: tag 40 [[height, width], typed array of the pixels]}
	b = appendHead(appendText(b, "data"), majorMap, 1)
	b = appendHead(appendText(b, channel), majorTag, tagMultiDim)
	b = appendHead(b, majorArray, 2)
	b = appendUint(appendUint(appendHead(b, majorArray, 2), uint64(se.Height)), uint64(se.Width))
	tag, _ := typedArrayTag(se.ElemSize)
	b = appendHead(b, majorTag, tag)
	switch se.Compression {
	case "bslz4":
		b = appendUint(appendText(appendHead(appendHead(b, majorTag, tagCompressed), majorArray, 3), "bslz4"), uint64(se.ElemSize))
	case "lz4":
		b = appendUint(appendText(appendHead(appendHead(b, majorTag, tagCompressed), majorArray, 3), "lz4"), 0)
	}
	b = append(appendHead(b, majorBytes, uint64(len(img.chunk))), img.chunk...)
	// user_data: what the file's records and plan say of the frame.
	r := img.record
	n := uint64(3)
	plan := img.n < len(se.ImageKeys) && img.n < len(se.Angles)
	if plan {
		n += 2
	}
	b = appendHead(appendText(b, "user_data"), majorMap, n)
	b = appendUint(appendText(b, "status"), uint64(r.Status))
	b = appendUint(appendText(b, "raw_crc32c"), uint64(r.RawCRC))
	b = appendUint(appendText(b, "data_crc32c"), uint64(r.DataCRC))
	if plan {
		b = appendUint(appendText(b, "image_key"), uint64(se.ImageKeys[img.n]))
		b = appendFloat(appendText(b, "rotation_angle"), se.Angles[img.n])
	}
	return b
}
