package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/logagg"
)

// Frame is one frame handed out by a Source: its parsed header and its
// payload, which stays valid until the frame is released.
type Frame struct {
	Header  frame.Header
	Payload []byte
	// Unchecked says the sender gave no payload CRC (a front end that
	// writes bare payloads): the payload's CRC is computed and recorded,
	// not compared with the header's.
	Unchecked bool
}

// Slots returns the frames a pipeline holds in flight by default, with
// workers compression workers (0: one per core) and decodes of batch
// frames: so many frames of a source may be handed out and not yet
// released at once. Few frames in flight keep their buffers in the
// processor's cache: on the 2-core machine, 4 slots replayed Pi-mega
// frames about 15% faster than 8 (h5ingest bench).
func Slots(workers, batch int) int {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return workers + 2*max(batch, 1)
}

// Source hands out frames. Next and Release are called from different
// goroutines; Next is called from one goroutine at a time.
type Source interface {
	// Next returns the next frame. It returns io.EOF when the scan's frames
	// are all delivered, and another error when the source cannot go on
	// (the frames delivered before stay good). It returns promptly with
	// ctx.Err() when ctx is done.
	Next(ctx context.Context) (*Frame, error)
	// Release gives a frame's buffer back to the source.
	Release(*Frame)
}

// HostMemorySource is implemented by sources whose payloads all lie in a
// few regions of memory outside the Go heap, such as a receiver's ring
// (fabric.Stream). A pipeline whose backend page-locks host memory
// (gpu.HostAllocator) registers them for the scan, so that payloads go to
// the device without being staged.
type HostMemorySource interface {
	Source
	// HostMemory returns the regions every payload lies in; they stay
	// mapped while the pipeline runs.
	HostMemory() [][]byte
}

// HostBufferSource is implemented by sources that read payloads into
// buffers of their own, such as a capture replay (package capture's Source). A
// pipeline whose backend hands out page-locked memory (gpu.HostAllocator)
// lends it to the source for the scan, so that payloads are read straight
// into memory the device copies from at full speed, without the driver's
// staging copy.
type HostBufferSource interface {
	Source
	// ReadIntoHost has the source read payloads into buffers from host
	// until the returned function is called, once the frames delivered
	// are all released. Several pipelines sharing the source (through a
	// Demux) may lend the same backend's memory: the buffers go back when
	// the last of them is done.
	ReadIntoHost(host gpu.HostAllocator) (done func())
}

// OverwritingSource is implemented by sources whose sender does not wait
// for Release, such as a detector front end writing round-robin into a
// ring without credits (roce.Stream): a frame's payload may be written
// over while the pipeline reads it.
type OverwritingSource interface {
	Source
	// Intact reports whether f was not written over while it was read. The
	// pipeline calls it once per frame handed out, after the last read of
	// its payload (the decode, a device's upload) and before Release; a
	// frame it reports overrun is recorded missing and counted
	// (Counts.Overrun). It may be called from several goroutines.
	Intact(f *Frame) bool
}

// Sink stores compressed chunks and per-frame records. The pipeline calls
// it from one goroutine.
type Sink interface {
	// WriteChunk stores the compressed chunk of frame n.
	WriteChunk(n int, chunk []byte) error
	// SetRecord stores the record of frame n.
	SetRecord(n int, r frame.Record) error
}

// Processor is the optional stage between decode and compress: it sees
// each decoded image in place and may change it, as a flat-field
// normalisation, a mask or a region of interest set to zero would. The
// pipeline makes one Processor per compression worker
// (Config.NewProcessor), so each is used by one goroutine at a time and
// may keep scratch memory of its own; it must not allocate per frame.
//
// The record of a processed frame keeps the CRC-32C of the payload as
// received (the detector's data); its data CRC is that of the image as
// processed and stored, so that verify proves the file.
//
// A processor that takes options, needs to know the scan (its plan, each
// frame's image key) or shares state between workers comes from a Stage,
// started with the scan and closed when it ends; NewProcessor is then the
// stage's Processor method.
type Processor interface {
	// Process works on the decoded image of frame n: f.Height() rows of
	// f.Width() little-endian pixels of f.PixelSize() bytes. It may
	// rewrite the pixels in place and must not keep image once it
	// returns. An error leaves the frame unwritten and recorded missing,
	// with the error logged: a frame a processor could not process is
	// never stored as if it were good; so does a panic, which the
	// pipeline takes as the processor's error. A processor sees only
	// frames received intact: one received with a payload CRC mismatch is
	// stored as received, unprocessed, so that no damaged frame enters a
	// processor's state (a flat-field's reference).
	Process(n int, f frame.Format, image []byte) error
}

// Config sets up a pipeline.
type Config struct {
	Format  frame.Format // the scan's frame format; frames of another are rejected
	Frames  int          // planned frames; 0 when the scan's length is not known
	Backend gpu.Backend  // decode and checksum
	// Fallback, where set, opens the backend that decodes in Backend's
	// place once Backend fails because its device is lost for the process
	// (gpu.ErrDeviceLost: a sticky CUDA error): the batch the loss struck
	// and every later one decode with it, so that no frame that arrived is
	// lost with the device. The pipeline closes it when Run returns.
	// Without it those frames are recorded missing and Run returns the
	// error.
	Fallback func() (gpu.Backend, error)
	// NewCodec makes one chunk codec for each compression worker.
	NewCodec func() (compress.Codec, error)
	// NewProcessor, where set, makes one Processor for each compression
	// worker: every decoded image goes through it before compression.
	NewProcessor func() (Processor, error)
	Workers      int // compression workers; 0 means one per core
	Batch        int // frames per decode call; 0 means 1 (a GPU backend wants more)
	Slots        int // frames in flight, bounding memory; 0 means Workers + 2*Batch
	// DropWhenFull never holds the source back, for a detector that cannot
	// wait: a frame that arrives while every slot is busy is dropped,
	// counted (Counts.Overflow) and recorded missing. Without it the source
	// waits for a free slot (back-pressure) and nothing is dropped.
	DropWhenFull bool
	// BackendShuffle has the backend bit-transpose each image the way the
	// codec's bitshuffle stage would (gpu.Job.ShuffleBlock), so that the
	// compression workers only compress the blocks. The files do not
	// change. The codec must be a compress.Preshuffled (bslz4, bszstd).
	BackendShuffle bool
	// DecodeThenCompress keeps compression on the compression workers,
	// once the backend has decoded the whole image. Without it, a backend
	// that compresses (gpu.Compressor: the cpu backend) compresses each
	// band of an image on the core that decoded it, while the band is in
	// its cache, where the codec's blocks allow (compress.BlockEncoder:
	// bslz4, bszstd) and neither a processor nor BackendShuffle is set;
	// the files do not change. It is there to compare the two.
	DecodeThenCompress bool
	// MaxFrameGap bounds a scan without a plan: a frame number more than
	// this beyond the highest received is rejected as out of range (see
	// NewTracker); 0 means DefaultMaxFrameGap.
	MaxFrameGap int
	// MissingGap is how far beyond a frame not received yet a received
	// frame must lie for Progress to count the frame missing while the
	// scan runs, rather than pending (see Counts); 0 means
	// DefaultMissingGap. A scan from a ring of slots uses the ring's depth.
	MissingGap int
	// Log gets the pipeline's messages; per-frame problems are aggregated
	// into one line a second with counts (package logagg).
	Log *zap.Logger
}

// Progress is a snapshot of a running pipeline.
type Progress struct {
	Counts
	Written     int           // frames written to the sink
	RawBytes    int64         // payload bytes of written frames
	ImageBytes  int64         // decoded image bytes of written frames
	StoredBytes int64         // compressed chunk bytes written
	Elapsed     time.Duration // since Run started
	// Active is the pipeline's own time: from the first frame taken from
	// the source to the last chunk written, without the set-up before nor
	// the closing after; 0 before a chunk is written.
	Active time.Duration
}

// Ratio returns the compression ratio so far: image bytes over stored bytes.
func (p Progress) Ratio() float64 {
	if p.StoredBytes == 0 {
		return 0
	}
	return float64(p.ImageBytes) / float64(p.StoredBytes)
}

// Pipeline runs frames from a source through decode and compression into a
// sink. Each stage runs in its own goroutines, joined by bounded channels;
// every buffer comes from a pool of Slots frames made at the start.
type Pipeline struct {
	cfg      Config
	log      *zap.Logger
	mu       sync.Mutex // guards tracker and start
	tracker  *Tracker
	start    time.Time // when Run started; zero before
	shuffle  int       // bitshuffle block the backend transposes images in; 0: none
	takeover takeover  // the backend in Backend's place once its device is lost
	// compression, where set, has the backend compress the images too
	// (gpu.Job.Compress).
	compression *gpu.Compression

	written, rawBytes, imageBytes, storedBytes atomic.Int64
	setup                                      atomic.Int64 // time.Duration Run took to set up
	// Since start, as time.Duration: the first frame taken from the source
	// and the last chunk written; 0 for none yet.
	firstIn, lastOut atomic.Int64
}

// slot carries one frame through the stages, with its own image and chunk
// buffers.
type slot struct {
	f      *Frame
	image  []byte
	chunk  []byte
	record frame.Record
	n      int
	write  bool // false: only the record goes to the sink
	// compressed says the backend left the chunk in chunk already.
	compressed bool
}

// New returns a pipeline for cfg.
func New(cfg Config) (*Pipeline, error) {
	if err := cfg.Format.Validate(); err != nil {
		return nil, fmt.Errorf("scan format: %w", err)
	}
	if cfg.Backend == nil || cfg.NewCodec == nil {
		return nil, errors.New("pipeline needs a backend and a codec")
	}
	if cfg.BackendShuffle && cfg.NewProcessor != nil {
		return nil, errors.New("a processor stage needs the images as decoded: not with the bit transpose on the backend")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1
	}
	if cfg.Slots <= 0 {
		cfg.Slots = Slots(cfg.Workers, cfg.Batch)
	}
	if cfg.Slots < cfg.Batch {
		cfg.Slots = cfg.Batch
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	log = logagg.Wrap(log, 0)
	tracker := NewTracker(cfg.Frames, cfg.MaxFrameGap)
	tracker.SetMissingGap(cfg.MissingGap)
	return &Pipeline{cfg: cfg, log: log, tracker: tracker}, nil
}

// Progress returns a snapshot of the pipeline's progress. It is safe to call
// while Run runs.
func (p *Pipeline) Progress() Progress {
	p.mu.Lock()
	c := p.tracker.Counts()
	start := p.start
	p.mu.Unlock()
	var elapsed, active time.Duration
	if !start.IsZero() {
		elapsed = time.Since(start)
	}
	if last := p.lastOut.Load(); last > 0 {
		active = time.Duration(last - p.firstIn.Load())
	}
	return Progress{
		Counts:      c,
		Written:     int(p.written.Load()),
		RawBytes:    p.rawBytes.Load(),
		ImageBytes:  p.imageBytes.Load(),
		StoredBytes: p.storedBytes.Load(),
		Elapsed:     elapsed,
		Active:      active,
	}
}

// SetupTime returns how long Run took to set up before it read the first
// frame: codecs made, image buffers allocated, host memory page-locked and
// device buffers reserved. Progress's Elapsed includes it.
func (p *Pipeline) SetupTime() time.Duration { return time.Duration(p.setup.Load()) }

// Frames returns the scan's frame count: the plan's, or for a scan of
// unknown length one past the highest frame number received.
func (p *Pipeline) Frames() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker.Frames()
}

// Run moves every frame of src into sink, then records the frames that never
// arrived as missing. It returns the source's error, if the source stopped
// early (the frames before it are all in the sink), or the first error of a
// stage that cannot go on; it stops early when ctx is done and still
// finishes the records.
func (p *Pipeline) Run(ctx context.Context, src Source, sink Sink) (Progress, error) {
	p.mu.Lock()
	p.start = time.Now()
	p.mu.Unlock()
	defer p.log.Sync() // the last second's per-frame events
	defer p.end()
	defer p.closeFallback()
	cfg := p.cfg
	codecs, procs, err := p.workers()
	if err != nil {
		return p.Progress(), err
	}
	imageSize := cfg.Format.ImageSize()
	chunkSize := codecs[0].Bound(imageSize)
	images := p.allocImages(cfg.Slots, imageSize)
	defer images.free()
	defer p.registerSource(src)()
	defer p.readIntoHost(src)()
	decoders := p.decoders()
	defer p.reserve(decoders)()
	free := make(chan *slot, cfg.Slots)
	for _, image := range images.bufs {
		free <- &slot{image: image, chunk: make([]byte, 0, chunkSize)}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	decodeCh := make(chan *slot, cfg.Slots)
	compressCh := make(chan *slot, cfg.Slots)
	writeCh := make(chan *slot, cfg.Slots)

	p.setup.Store(int64(time.Since(p.start)))

	var srcErr error
	var producers sync.WaitGroup // senders on writeCh
	producers.Add(1 + cfg.Workers)
	go func() {
		defer producers.Done()
		defer close(decodeCh)
		srcErr = p.read(ctx, src, free, decodeCh, writeCh)
	}()
	var decodeErr error
	go func() {
		defer close(compressCh)
		decodeErr = p.decodeAll(decoders, src, decodeCh, compressCh)
		if decodeErr != nil {
			cancel(decodeErr)
		}
	}()
	for i, codec := range codecs {
		go func() {
			defer producers.Done()
			p.compress(codec, procs[i], compressCh, writeCh)
		}()
	}
	go func() {
		producers.Wait()
		close(writeCh)
	}()
	sinkErr := p.write(sink, writeCh, free)
	if sinkErr != nil {
		cancel(sinkErr)
		for s := range writeCh { // let the other stages finish
			free <- s
		}
	}
	// The frames that never reached the file are recorded missing even
	// after the sink failed (a full disk), so that the file's records
	// describe every frame the summary counts.
	if err := p.finishRecords(sink); sinkErr == nil {
		sinkErr = err
	}
	switch {
	case sinkErr != nil:
		return p.Progress(), sinkErr
	case decodeErr != nil:
		return p.Progress(), decodeErr
	}
	return p.Progress(), srcErr
}

// workers makes what each compression worker uses: its codec, and its
// processor where the configuration has one.
func (p *Pipeline) workers() ([]compress.Codec, []Processor, error) {
	cfg := p.cfg
	codecs := make([]compress.Codec, cfg.Workers)
	procs := make([]Processor, cfg.Workers)
	for i := range cfg.Workers {
		c, err := cfg.NewCodec()
		if err != nil {
			return nil, nil, fmt.Errorf("make codec: %w", err)
		}
		codecs[i] = c
		if cfg.NewProcessor != nil {
			if procs[i], err = cfg.NewProcessor(); err != nil {
				return nil, nil, fmt.Errorf("make processor: %w", err)
			}
		}
		if cfg.BackendShuffle { // compress takes the shuffled path of each
			ps, ok := c.(compress.Preshuffled)
			if !ok {
				return nil, nil, errors.New("backend shuffle needs a codec with a bitshuffle stage (bslz4 or bszstd)")
			}
			p.shuffle = ps.BlockElems()
		}
	}
	p.compressOnBackend(codecs[0])
	return codecs, procs, nil
}

// compressOnBackend has the backend compress the images as it decodes
// them (Config.DecodeThenCompress says when), with encoders made like
// codec.
func (p *Pipeline) compressOnBackend(codec compress.Codec) {
	cfg := p.cfg
	_, backend := cfg.Backend.(gpu.Compressor)
	be, blocks := codec.(compress.BlockEncoder)
	if !backend || !blocks || cfg.DecodeThenCompress || cfg.BackendShuffle || cfg.NewProcessor != nil {
		return
	}
	p.compression = &gpu.Compression{BlockElems: be.BlockElems(), NewEncoder: func() (gpu.ChunkEncoder, error) {
		c, err := cfg.NewCodec()
		if err != nil {
			return nil, fmt.Errorf("make codec: %w", err)
		}
		be, ok := c.(compress.BlockEncoder)
		if !ok {
			return nil, fmt.Errorf("codec %T compresses no blocks apart", c)
		}
		return be, nil
	}}
}

// imageBufs are the slots' image buffers, page-locked by the backend where
// it offers that (gpu.HostAllocator), so that a device copies images out
// asynchronously and at full speed.
type imageBufs struct {
	bufs [][]byte
	host gpu.HostAllocator // nil: Go memory
	log  *zap.Logger
}

// allocImages returns n image buffers of size bytes, from the backend where
// it allocates host memory, else, or where that fails, from Go.
func (p *Pipeline) allocImages(n, size int) *imageBufs {
	b := &imageBufs{bufs: make([][]byte, 0, n), log: p.log}
	if host, ok := p.cfg.Backend.(gpu.HostAllocator); ok {
		b.host = host
		for range n {
			buf, err := host.AllocHost(size)
			if err != nil {
				p.log.Warn("page-locked image buffers unavailable, using ordinary memory (slower device copies)",
					zap.String("backend", p.cfg.Backend.Name()), zap.Error(err))
				b.free()
				b.host = nil
				break
			}
			b.bufs = append(b.bufs, buf)
		}
	}
	for len(b.bufs) < n {
		b.bufs = append(b.bufs, make([]byte, size))
	}
	return b
}

// free gives page-locked buffers back to the backend. It is called when
// every stage is done with them.
func (b *imageBufs) free() {
	if b.host != nil {
		for _, buf := range b.bufs {
			if err := b.host.FreeHost(buf); err != nil {
				b.log.Warn("free page-locked image buffer", zap.Error(err))
			}
		}
	}
	b.bufs = b.bufs[:0]
}

// registerSource page-locks the memory src delivers payloads in, where the
// backend can (gpu.HostAllocator) and src says where it is
// (HostMemorySource), and returns what undoes it once every stage is done.
// Memory that cannot be locked is only slower to copy: a warning.
func (p *Pipeline) registerSource(src Source) (undo func()) {
	host, ok := p.cfg.Backend.(gpu.HostAllocator)
	ms, ok2 := src.(HostMemorySource)
	if !ok || !ok2 {
		return func() {}
	}
	var locked [][]byte
	for _, m := range ms.HostMemory() {
		if err := host.RegisterHost(m); err != nil {
			p.log.Warn("source memory not page-locked, using it as it is (slower device copies)",
				zap.Int("bytes", len(m)), zap.Error(err))
			continue
		}
		locked = append(locked, m)
	}
	return func() {
		for _, m := range locked {
			if err := host.UnregisterHost(m); err != nil {
				p.log.Warn("unlock source memory", zap.Error(err))
			}
		}
	}
}

// readIntoHost lends the backend's page-locked memory (gpu.HostAllocator)
// to a source that reads payloads into buffers of its own
// (HostBufferSource), such as a capture replay, and returns what ends the
// loan once every stage is done.
func (p *Pipeline) readIntoHost(src Source) (done func()) {
	host, ok := p.cfg.Backend.(gpu.HostAllocator)
	bs, ok2 := src.(HostBufferSource)
	if !ok || !ok2 {
		return func() {}
	}
	return bs.ReadIntoHost(host)
}

// read takes frames from the source, applies the tracker's rules and hands
// accepted frames to decode; frames that only need a record go straight to
// the writer.
func (p *Pipeline) read(ctx context.Context, src Source, free <-chan *slot, decodeCh, writeCh chan<- *slot) error {
	for {
		var s *slot
		if !p.cfg.DropWhenFull {
			select {
			case s = <-free:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		f, err := src.Next(ctx)
		if err == nil && p.firstIn.Load() == 0 {
			p.firstIn.Store(p.sinceStart())
		}
		if err != nil {
			if s != nil {
				// The slot goes back through the writer, which owns the pool.
				s.write, s.n = false, -1
				writeCh <- s
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, frame.ErrNotFrame) {
				p.mu.Lock()
				p.tracker.NotFrame()
				p.mu.Unlock()
			}
			return err
		}
		if s == nil {
			select {
			case s = <-free:
			default:
				p.overflow(src, f)
				continue
			}
		}
		h := &f.Header
		p.mu.Lock()
		verdict := p.tracker.Admit(h)
		p.mu.Unlock()
		if verdict != Accept {
			p.logVerdict(h.FrameNumber, verdict)
			src.Release(f)
			s.write, s.n = false, -1
			writeCh <- s
			continue
		}
		s.n = int(h.FrameNumber)
		if err := p.check(h); err != nil {
			p.log.Warn("frame rejected", zap.Uint64("frame", h.FrameNumber), zap.Error(err))
			// The payload's CRC as received, as for every frame, not the
			// header's claim.
			s.record = frame.Record{Timestamp: h.Timestamp, RawCRC: frame.Checksum(f.Payload), Status: frame.StatusRejected}
			src.Release(f)
			s.write = false
			writeCh <- s
			continue
		}
		s.f, s.write = f, true
		decodeCh <- s
	}
}

// overflow drops a frame that found every slot busy, keeping the tracker's
// rules: a duplicate or out-of-range frame is counted as such, any other is
// recorded missing and counted as an overflow.
func (p *Pipeline) overflow(src Source, f *Frame) {
	h := &f.Header
	p.mu.Lock()
	verdict := p.tracker.Admit(h)
	if verdict == Accept {
		p.tracker.Overflow(h.FrameNumber)
	}
	p.mu.Unlock()
	if verdict == Accept {
		p.log.Warn("frame dropped", zap.Uint64("frame", h.FrameNumber), zap.String("reason", "pipeline full"))
	} else {
		p.logVerdict(h.FrameNumber, verdict)
	}
	src.Release(f)
}

// logVerdict logs a frame the tracker did not accept: a later copy is
// dropped, a frame beyond the scan rejected.
func (p *Pipeline) logVerdict(n uint64, v Verdict) {
	msg := "frame dropped"
	if v == OutOfRange {
		msg = "frame rejected"
	}
	p.log.Warn(msg, zap.Uint64("frame", n), zap.Stringer("reason", v))
}

// check reports a frame the scan cannot decode: a header inconsistent with
// its payload, or a format other than the scan's.
func (p *Pipeline) check(h *frame.Header) error {
	if err := h.Check(); err != nil {
		return err
	}
	if h.Format != p.cfg.Format {
		return fmt.Errorf("%w: frame %d is %v, the scan is %v", frame.ErrRejected, h.FrameNumber, h.Format, p.cfg.Format)
	}
	return nil
}

// deviceRounds is how many decode calls a pipeline keeps in flight on a
// device backend (gpu.Reserver): while the device works on one batch, the
// next batch's copies are queued, so that copies overlap kernels within one
// module.
const deviceRounds = 2

// decoders returns how many goroutines call the backend: deviceRounds for a
// device backend; two for one that compresses the images too, so that one
// frame's tasks keep the cores busy while the other's call hands its chunk
// on; else one (the CPU backend spreads each frame over every core
// already). They pass their frames on in the order they took them
// (decodeOrder).
func (p *Pipeline) decoders() int {
	if _, ok := p.cfg.Backend.(gpu.Reserver); ok {
		return deviceRounds
	}
	if p.compression != nil {
		return 2
	}
	return 1
}

// reserve has a device backend (gpu.Reserver) allocate, now, its buffers
// for calls decode calls of full batches of the scan's format, so that
// none is allocated or grown while frames arrive, and returns what gives
// them back. A refusal costs only speed: a warning, and buffers grown
// as the first frames come.
func (p *Pipeline) reserve(calls int) (release func()) {
	r, ok := p.cfg.Backend.(gpu.Reserver)
	if !ok {
		return func() {}
	}
	release, err := r.Reserve(p.cfg.Format, p.cfg.Batch, calls, p.shuffle != 0)
	if err != nil {
		p.log.Warn("device buffers not reserved for the scan; they grow with the first frames",
			zap.String("backend", p.cfg.Backend.Name()), zap.Error(err))
		return func() {}
	}
	return release
}

// decodeAll runs n decode goroutines on in and returns the first error of
// the backend. After an error every goroutine passes the frames on as
// missing until in closes.
func (p *Pipeline) decodeAll(n int, src Source, in <-chan *slot, out chan<- *slot) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	order := newDecodeOrder()
	for range n {
		wg.Go(func() {
			if err := p.decode(src, in, out, failed, order); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// decode gathers batches of frames and decodes them with the backend. Once
// the backend has failed (here or, as failed says, in another decode
// goroutine), frames pass on as missing.
func (p *Pipeline) decode(src Source, in <-chan *slot, out chan<- *slot, failed func() bool, order *decodeOrder) error {
	batch := make([]*slot, 0, p.cfg.Batch)
	jobs := make([]gpu.Job, p.cfg.Batch)
	overwriting, _ := src.(OverwritingSource)
	backend := p.cfg.Backend   // the fallback once the device is lost
	missing := func(s *slot) { // the record stays missing; the slot goes home
		src.Release(s.f)
		s.f, s.write = nil, false
		s.record.Status = frame.StatusMissing
		out <- s
	}
	for {
		var ticket uint64
		var ok bool
		batch, ticket, ok = order.take(in, batch[:0], p.cfg.Batch)
		if !ok {
			return nil
		}
		if failed() {
			order.wait(ticket)
			for _, s := range batch {
				missing(s)
			}
			order.done()
			continue
		}
		jobs := jobs[:len(batch)]
		for i, s := range batch {
			jobs[i] = gpu.Job{Header: s.f.Header, Payload: s.f.Payload, Image: s.image, ShuffleBlock: p.shuffle,
				Compress: p.compression, Chunk: s.chunk[:0], DiscardImage: p.compression != nil}
		}
		if err := p.decodeBatch(&backend, jobs); err != nil {
			err = fmt.Errorf("decode with %s backend: %w", backend.Name(), err)
			order.wait(ticket)
			for _, s := range batch {
				missing(s)
			}
			order.done()
			for s := range in {
				missing(s)
			}
			return err
		}
		order.wait(ticket)
		for i, s := range batch {
			j := &jobs[i]
			h := &s.f.Header
			s.record = frame.Record{Timestamp: h.Timestamp, RawCRC: j.RawCRC, DataCRC: j.DataCRC, Status: frame.StatusOK}
			switch {
			case overwriting != nil && !overwriting.Intact(s.f):
				p.mu.Lock()
				p.tracker.Overrun(h.FrameNumber)
				p.mu.Unlock()
				s.record = frame.Record{Timestamp: h.Timestamp, Status: frame.StatusMissing}
				s.write = false
			case j.Err != nil:
				p.log.Warn("frame rejected", zap.Uint64("frame", h.FrameNumber), zap.Error(j.Err))
				s.record = frame.Record{Timestamp: h.Timestamp, RawCRC: frame.Checksum(s.f.Payload), Status: frame.StatusRejected}
				s.write = false
			case j.RawCRC != h.PayloadCRC && !s.f.Unchecked:
				p.log.Warn("payload CRC mismatch", zap.Uint64("frame", h.FrameNumber),
					zap.String("header", fmt.Sprintf("%08x", h.PayloadCRC)), zap.String("computed", fmt.Sprintf("%08x", j.RawCRC)))
				s.record.Status = frame.StatusCRCMismatch
			}
			switch {
			case !s.write:
			case j.Compressed:
				s.chunk, s.compressed = j.Chunk, true
			case j.CompressErr != nil:
				p.log.Error("compress failed", zap.Int("frame", s.n), zap.Error(j.CompressErr))
				s.write = false
				s.record.Status = frame.StatusMissing
			}
			p.rawBytes.Add(int64(len(s.f.Payload)))
			src.Release(s.f)
			s.f = nil
			out <- s
		}
		order.done()
	}
}

// decodeOrder hands the decode goroutines their batches in turn, and has
// each pass its frames on in the same turn, so that frames leave the
// decode stage in the order they came from the source, however many
// decode calls run at once: a source's Intact, where roce's --record
// keeps each frame, sees them in that order.
type decodeOrder struct {
	takeMu sync.Mutex // held while a goroutine takes a batch
	next   uint64     // the ticket of the next batch taken

	mu     sync.Mutex
	turn   sync.Cond
	passed uint64 // the batches passed on
}

func newDecodeOrder() *decodeOrder {
	o := new(decodeOrder)
	o.turn.L = &o.mu
	return o
}

// take appends to batch the next frame of in and as many more as are
// waiting, up to n in all, and returns the batch's ticket; false once in
// is closed and empty.
func (o *decodeOrder) take(in <-chan *slot, batch []*slot, n int) ([]*slot, uint64, bool) {
	o.takeMu.Lock()
	defer o.takeMu.Unlock()
	s, ok := <-in
	if !ok {
		return batch, 0, false
	}
	batch = append(batch, s)
	for len(batch) < n {
		select {
		case s, ok := <-in:
			if !ok {
				return batch, o.ticket(), true
			}
			batch = append(batch, s)
		default:
			return batch, o.ticket(), true
		}
	}
	return batch, o.ticket(), true
}

// ticket returns the next ticket; takeMu is held.
func (o *decodeOrder) ticket() uint64 {
	t := o.next
	o.next++
	return t
}

// wait blocks until every batch taken before the one of ticket has been
// passed on.
func (o *decodeOrder) wait(ticket uint64) {
	o.mu.Lock()
	for o.passed != ticket {
		o.turn.Wait()
	}
	o.mu.Unlock()
}

// done says that the batch whose turn it is has been passed on.
func (o *decodeOrder) done() {
	o.mu.Lock()
	o.passed++
	o.mu.Unlock()
	o.turn.Broadcast()
}

// compress runs each decoded image through the processor, where there is
// one, and encodes it into a chunk; images the backend has transposed go
// to the codec's block compressor alone.
func (p *Pipeline) compress(codec compress.Codec, proc Processor, in <-chan *slot, out chan<- *slot) {
	encode := codec.Encode
	if p.shuffle != 0 {
		encode = codec.(compress.Preshuffled).EncodeShuffled
	}
	for s := range in {
		if s.write && proc != nil && s.record.Status == frame.StatusOK {
			p.process(proc, s)
		}
		if s.write && !s.compressed {
			chunk, err := encode(s.chunk[:0], s.image[:p.cfg.Format.ImageSize()])
			if err != nil {
				p.log.Error("compress failed", zap.Int("frame", s.n), zap.Error(err))
				s.write = false
				s.record.Status = frame.StatusMissing
			}
			s.chunk = chunk
		}
		out <- s
	}
}

// process runs s's image through proc; the record's data CRC becomes the
// processed image's. A failure leaves the frame unwritten and missing.
func (p *Pipeline) process(proc Processor, s *slot) {
	image := s.image[:p.cfg.Format.ImageSize()]
	if err := processSafely(proc, s.n, p.cfg.Format, image); err != nil {
		p.log.Error("processor failed: frame not written", zap.Int("frame", s.n), zap.Error(err))
		s.write = false
		s.record = frame.Record{Timestamp: s.record.Timestamp, RawCRC: s.record.RawCRC, Status: frame.StatusMissing}
		return
	}
	s.record.DataCRC = frame.Checksum(image)
}

// processSafely runs proc on image of frame n, turning a panic of the
// processor (a facility's own stage) into its error: one bad frame costs
// that frame, not the scan and every frame before it.
func processSafely(proc Processor, n int, f frame.Format, image []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("processor panicked: %v", r)
		}
	}()
	return proc.Process(n, f, image)
}

// write hands chunks and records to the sink, one goroutine, and returns
// every slot to the pool.
func (p *Pipeline) write(sink Sink, in <-chan *slot, free chan<- *slot) error {
	for s := range in {
		if s.n >= 0 {
			if err := p.store(sink, s); err != nil {
				free <- s
				return err
			}
		}
		s.n, s.write, s.compressed, s.record = -1, false, false, frame.Record{}
		free <- s
	}
	return nil
}

// store writes one frame's chunk (where it has one) and record.
func (p *Pipeline) store(sink Sink, s *slot) error {
	if s.write {
		if err := sink.WriteChunk(s.n, s.chunk); err != nil {
			return fmt.Errorf("write frame %d: %w", s.n, err)
		}
		p.written.Add(1)
		p.imageBytes.Add(int64(p.cfg.Format.ImageSize()))
		p.storedBytes.Add(int64(len(s.chunk)))
		p.lastOut.Store(p.sinceStart())
	}
	p.mu.Lock()
	switch s.record.Status {
	case frame.StatusRejected:
		p.tracker.Reject(uint64(s.n))
	case frame.StatusOK, frame.StatusCRCMismatch:
		p.tracker.Done(uint64(s.n), s.record.Status)
	}
	p.mu.Unlock()
	if err := sink.SetRecord(s.n, s.record); err != nil {
		return fmt.Errorf("record frame %d: %w", s.n, err)
	}
	return nil
}

// sinceStart returns the time since Run started, at least 1 ns, so that
// 0 can mean "not yet". Only the stages call it, after Run set the start.
func (p *Pipeline) sinceStart() int64 {
	return max(int64(time.Since(p.start)), 1)
}

// end records that the scan has ended: no frame is pending any more.
func (p *Pipeline) end() {
	p.mu.Lock()
	p.tracker.End()
	p.mu.Unlock()
}

// Discard counts n frames that arrived in the source but that the
// pipeline never took, because the scan was cancelled first
// (Counts.Discarded). Call it once Run has returned.
func (p *Pipeline) Discard(n int) {
	p.mu.Lock()
	p.tracker.Discard(n)
	p.mu.Unlock()
}

// finishRecords records every frame that never arrived as missing.
func (p *Pipeline) finishRecords(sink Sink) error {
	p.end()
	p.mu.Lock()
	n := p.tracker.Frames()
	var missing []int
	for i := range n {
		if p.tracker.Status(i) == frame.StatusMissing {
			missing = append(missing, i)
		}
	}
	p.mu.Unlock()
	for _, i := range missing {
		if err := sink.SetRecord(i, frame.Record{Status: frame.StatusMissing}); err != nil {
			return fmt.Errorf("record missing frame %d: %w", i, err)
		}
	}
	if len(missing) > 0 {
		p.log.Warn("frames missing", zap.Int("count", len(missing)), zap.Int("first", missing[0]), zap.Int("last", missing[len(missing)-1]))
	}
	return nil
}
