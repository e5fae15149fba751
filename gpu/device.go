package gpu

import (
	"fmt"
	"sync"

	"h5ingest/frame"
	"h5ingest/gpu/kernels"
)

// This file holds the host side of the device backend: how a batch is cut
// into rounds, laid out in device memory and described to the kernels of
// package kernels, and how the piece CRCs the kernels leave are folded
// into each frame's CRCs. The device itself is an engine: the CUDA driver
// (cuda.go), or in tests the same kernels compiled for the host.

// region is one of the device buffers of a lane.
type region int

const (
	regPayload region = iota // the round's payloads, each at a multiple of kernels.Align
	regImage                 // the round's images, likewise, each followed by its transposed copy where asked
	regSubs                  // sub-piece CRCs, 4 bytes each
	regPieces                // piece CRCs, 4 bytes each
	regDescs                 // the frame descriptors, then the chip orientation flags
	nRegions
)

// engine runs the kernels on one device stream for a lane. Calls other
// than wait may return before the device has done the work; the work runs
// in call order. An engine is used by one goroutine at a time.
type engine interface {
	// reserve makes every region hold at least sizes[r] bytes, and the host
	// staging buffers at least sizes[regDescs] and sizes[regPieces]. It may
	// move them, losing their contents.
	reserve(sizes *[nRegions]int) error
	// addr returns the device address of region r.
	addr(r region) uint64
	// hostDescs and hostPieces return the staging buffers (page-locked on a
	// GPU) for the descriptors going in and the piece CRCs coming out.
	hostDescs() []byte
	hostPieces() []byte
	// copyIn copies src to region r at off; src must stay unchanged until
	// wait returns.
	copyIn(r region, off int, src []byte) error
	// launch runs a kernel over gridX x n blocks of kernels.BlockSize
	// threads, with the descriptors at the start of regDescs.
	launch(kernel string, gridX, n int) error
	// copyOut copies len(dst) bytes of region r at off into dst, which holds
	// them once wait returns.
	copyOut(dst []byte, r region, off int) error
	// wait blocks until the device has done all the work given so far.
	wait() error
	// close frees the engine's buffers and stream.
	close() error
}

// Limits of one round: the frames and bytes (payloads and images) that a
// lane's device buffers hold at once. A batch larger than a round goes as
// several, overlapping on two lanes.
const (
	roundFrames = 1024
	roundBytes  = 256 << 20
)

// lfsrTables is where the kernels read the LFSR tables
// (kernels.LUTConstant or kernels.LUTGlobal). Constant memory until a GPU
// measures the other faster (BenchmarkKernels in package gpu/cuda).
const lfsrTables = kernels.LUTConstant

// lane is an engine and the state of the round it runs.
type lane struct {
	eng    engine
	lut    uint32 // Frame.LUT of its rounds
	jobs   []Job  // the batch the round belongs to
	idx    []int  // the round's jobs
	frames []kernels.Frame
	ops    opCache
	sizes  [nRegions]int // the round's bytes per region
}

// opCache keeps the CRC-32C combiners of the last few lengths.
type opCache struct {
	n    [4]int
	op   [4]CRC32CCombiner
	next int
}

func (c *opCache) get(n int) uint32 {
	for i := range c.n {
		if c.op[i] != 0 && c.n[i] == n {
			return uint32(c.op[i])
		}
	}
	i := c.next
	c.next = (c.next + 1) % len(c.n)
	c.n[i], c.op[i] = n, NewCRC32CCombiner(int64(n))
	return uint32(c.op[i])
}

func alignUp(n int) int { return (n + kernels.Align - 1) / kernels.Align * kernels.Align }

// begin lays out a round of the valid jobs from jobs[start] on and gives
// the engine all its work: copies in, the kernels, copies out. A job that
// asks for a transposed image gets it copied out in place of the image. It
// returns where the next round starts.
func (l *lane) begin(jobs []Job, start int, rot frame.Orientation) (int, error) {
	l.jobs, l.idx, l.frames = jobs, l.idx[:0], l.frames[:0]
	next, w := l.gather(start)
	if len(l.idx) == 0 {
		return next, nil
	}
	rotOff := alignUp(len(l.frames) * kernels.FrameSize)
	l.sizes[regDescs] = rotOff + len(rot)
	if err := l.eng.reserve(&l.sizes); err != nil {
		return next, err
	}
	if err := l.upload(rot, rotOff); err != nil {
		return next, err
	}
	if err := l.launch(w); err != nil {
		return next, err
	}
	return next, l.download()
}

// roundWork is the work of each kernel in a round: the most of any of
// its frames.
type roundWork struct{ units, subs, pieces, groups int }

// gather takes l.jobs from start into the round, up to its byte and frame
// limits, and lays out each frame's regions, their offsets relative to
// each region's start. It returns the first job left for the next round.
func (l *lane) gather(start int) (next int, w roundWork) {
	sizes := &l.sizes
	*sizes = [nRegions]int{}
	bytes := 0
	i := start
	for ; i < len(l.jobs); i++ {
		j := &l.jobs[i]
		if j.Err != nil {
			continue
		}
		f := j.Header.Format
		n := f.PayloadSize() + f.ImageSize()
		if j.ShuffleBlock != 0 {
			n += f.ImageSize()
		}
		if len(l.idx) > 0 && (bytes+n > roundBytes || len(l.idx) == roundFrames) {
			break
		}
		bytes += n
		u, rs, is, rp, ip := kernels.Layout(f)
		l.idx = append(l.idx, i)
		l.frames = append(l.frames, kernels.Frame{
			Payload: uint64(sizes[regPayload]), Image: uint64(sizes[regImage]),
			Subs: uint64(sizes[regSubs]), Pieces: uint64(sizes[regPieces]),
			PayloadSize: uint32(f.PayloadSize()), ImageSize: uint32(f.ImageSize()),
			Units: uint32(u), RawSubs: uint32(rs), ImgSubs: uint32(is), RawPieces: uint32(rp), ImgPieces: uint32(ip),
			OpSub:     l.ops.get(kernels.CRCSubSize),
			OpRawLast: l.ops.get(kernels.LastSub(f.PayloadSize())),
			OpImgLast: l.ops.get(kernels.LastSub(f.ImageSize())),
			Format:    f,
			LUT:       l.lut,
		})
		sizes[regPayload] += alignUp(f.PayloadSize())
		sizes[regImage] += alignUp(f.ImageSize())
		if j.ShuffleBlock != 0 {
			d := &l.frames[len(l.frames)-1]
			d.Block, d.Shuffled = uint32(j.ShuffleBlock), uint64(sizes[regImage])
			sizes[regImage] += alignUp(f.ImageSize())
			w.groups = max(w.groups, kernels.ShuffleUnits(f))
		}
		sizes[regSubs] += alignUp(4 * (rs + is))
		sizes[regPieces] += 4 * (rp + ip)
		w.units, w.subs, w.pieces = max(w.units, u), max(w.subs, rs+is), max(w.pieces, rp+ip)
	}
	return i, w
}

// upload makes the round's frame descriptors' addresses absolute and
// copies the descriptors, the chip rotations (at rotOff among them) and
// the payloads to the device.
func (l *lane) upload(rot frame.Orientation, rotOff int) error {
	descs := l.eng.hostDescs()[:l.sizes[regDescs]]
	var rotAddr uint64
	if rot != nil {
		rotAddr = l.eng.addr(regDescs) + uint64(rotOff)
		for k, deg := range rot {
			descs[rotOff+k] = byte(deg / 180)
		}
	}
	for n := range l.frames {
		d := &l.frames[n]
		d.Payload += l.eng.addr(regPayload)
		d.Image += l.eng.addr(regImage)
		if d.Block != 0 {
			d.Shuffled += l.eng.addr(regImage)
		}
		d.Subs += l.eng.addr(regSubs)
		d.Pieces += l.eng.addr(regPieces)
		d.Rot = rotAddr
		d.Put(descs[n*kernels.FrameSize:])
		if err := l.eng.copyIn(regPayload, int(d.Payload-l.eng.addr(regPayload)), l.jobs[l.idx[n]].Payload); err != nil {
			return err
		}
	}
	return l.eng.copyIn(regDescs, 0, descs)
}

// launch starts the round's kernels, each over the work its frames need.
func (l *lane) launch(w roundWork) error {
	n := len(l.frames)
	for _, k := range [...]struct {
		name string
		work int
	}{{kernels.Decode, w.units}, {kernels.CRCSub, w.subs}, {kernels.CRCFold, w.pieces}, {kernels.Shuffle, w.groups}} {
		if k.work == 0 {
			continue // no frame of the round asks for a transpose
		}
		if err := l.eng.launch(k.name, kernels.Grid(k.work), n); err != nil {
			return err
		}
	}
	return nil
}

// download queues the copies of the round's images (transposed where
// asked) and CRC pieces back to the host.
func (l *lane) download() error {
	for n, d := range l.frames {
		j := &l.jobs[l.idx[n]]
		from := d.Image
		if d.Block != 0 {
			from = d.Shuffled
		}
		if err := l.eng.copyOut(j.Image[:d.ImageSize], regImage, int(from-l.eng.addr(regImage))); err != nil {
			return err
		}
	}
	return l.eng.copyOut(l.eng.hostPieces()[:l.sizes[regPieces]], regPieces, 0)
}

// finish waits for the round and sets its jobs' CRCs.
func (l *lane) finish() error {
	if len(l.idx) == 0 {
		return nil
	}
	if err := l.eng.wait(); err != nil {
		return err
	}
	pieces := l.eng.hostPieces()
	base := l.eng.addr(regPieces)
	var fold folder
	for n := range l.frames {
		d := &l.frames[n]
		p := pieces[d.Pieces-base:]
		j := &l.jobs[l.idx[n]]
		j.RawCRC = foldPieces(&fold, p, int(d.RawPieces), int(d.PayloadSize))
		j.DataCRC = foldPieces(&fold, p[4*d.RawPieces:], int(d.ImgPieces), int(d.ImageSize))
	}
	l.jobs, l.idx = nil, l.idx[:0]
	return nil
}

// foldPieces folds the CRCs of the n pieces of a buffer of size bytes
// (little-endian uint32s at p) into the buffer's CRC.
func foldPieces(fold *folder, p []byte, n, size int) uint32 {
	fold.crc = 0
	for i := range n {
		crc := uint32(p[4*i]) | uint32(p[4*i+1])<<8 | uint32(p[4*i+2])<<16 | uint32(p[4*i+3])<<24
		fold.add(crc, min(kernels.PieceBytes, size-i*kernels.PieceBytes))
	}
	return fold.crc
}

// maxLanes bounds the lanes of a device backend, however much is reserved.
const maxLanes = 64

// devBackend is a Backend that decodes on a device through engines, one
// per lane. Each Decode call runs its batch in rounds on up to two lanes at
// a time, so one round's copies overlap another's kernels; concurrent
// calls take other lanes.
type devBackend struct {
	name    string
	rot     frame.Orientation
	lut     uint32
	lanes   chan *lane
	release func() error // frees the device after the lanes

	mu     sync.RWMutex // read-held by Decode and Reserve, write-held by Close
	closed bool

	resMu     sync.Mutex // serialises Reserve
	all       []*lane
	newEngine func() (engine, error)
	calls     int           // Decode calls reserved for, by every Reserve not released
	sizes     [nRegions]int // the largest round reserved
}

func newDevBackend(name string, rot frame.Orientation, lut uint32, engines []engine, newEngine func() (engine, error), release func() error) *devBackend {
	d := &devBackend{name: name, rot: rot, lut: lut, lanes: make(chan *lane, max(maxLanes, len(engines))), release: release, newEngine: newEngine}
	for _, e := range engines {
		d.addLane(e)
	}
	return d
}

func (d *devBackend) addLane(e engine) {
	l := &lane{eng: e, lut: d.lut, idx: make([]int, 0, roundFrames), frames: make([]kernels.Frame, 0, roundFrames)}
	d.all = append(d.all, l)
	d.lanes <- l
}

// Reserve implements Reserver: it makes sure the backend has a lane for
// each of the Decode calls reserved for (adding lanes, with their streams,
// up to maxLanes), and sizes every lane's device and page-locked buffers
// for a round of batch frames of format f, so that no buffer is allocated
// or grown while frames arrive.
func (d *devBackend) Reserve(f frame.Format, batch, calls int, shuffle bool) (func(), error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("gpu: %s backend: reserve: %w", d.name, err)
	}
	if batch < 1 || calls < 1 {
		return nil, fmt.Errorf("gpu: %s backend: reserve %d calls of %d frames: want at least one of each", d.name, calls, batch)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, ErrClosed
	}
	d.resMu.Lock()
	defer d.resMu.Unlock()
	sizes := roundSizes(f, batch, shuffle, len(d.rot))
	for r := range sizes {
		d.sizes[r] = max(d.sizes[r], sizes[r])
	}
	want := min(d.calls+calls, maxLanes)
	for len(d.all) < want && d.newEngine != nil {
		e, err := d.newEngine()
		if err != nil {
			return nil, fmt.Errorf("gpu: %s backend: reserve lane %d: %w", d.name, len(d.all)+1, err)
		}
		if err := e.reserve(&d.sizes); err != nil {
			e.close()
			return nil, fmt.Errorf("gpu: %s backend: reserve lane %d: %w", d.name, len(d.all)+1, err)
		}
		d.addLane(e)
	}
	// Size the lanes there were: take each as it comes free.
	taken := make([]*lane, 0, len(d.all))
	defer func() {
		for _, l := range taken {
			d.lanes <- l
		}
	}()
	for range d.all {
		l := <-d.lanes
		taken = append(taken, l)
		if err := l.eng.reserve(&d.sizes); err != nil {
			return nil, fmt.Errorf("gpu: %s backend: reserve: %w", d.name, err)
		}
	}
	d.calls += calls
	var once sync.Once
	return func() {
		once.Do(func() {
			d.resMu.Lock()
			d.calls -= calls
			d.resMu.Unlock()
		})
	}, nil
}

// roundSizes returns the bytes per region of a round of n frames of
// format f (n cut to what a round holds), transposed as well when shuffle,
// with rot chip orientation flags: what lane.begin lays out.
func roundSizes(f frame.Format, n int, shuffle bool, rot int) [nRegions]int {
	per := f.PayloadSize() + f.ImageSize()
	if shuffle {
		per += f.ImageSize()
	}
	n = max(1, min(n, roundFrames, roundBytes/max(per, 1)))
	_, rs, is, rp, ip := kernels.Layout(f)
	var sizes [nRegions]int
	sizes[regPayload] = n * alignUp(f.PayloadSize())
	sizes[regImage] = n * alignUp(f.ImageSize())
	if shuffle {
		sizes[regImage] *= 2
	}
	sizes[regSubs] = n * alignUp(4*(rs+is))
	sizes[regPieces] = n * 4 * (rp + ip)
	sizes[regDescs] = alignUp(n*kernels.FrameSize) + rot
	return sizes
}

// Name returns the backend's name.
func (d *devBackend) Name() string { return d.name }

// Close waits for Decode calls in progress and frees the device.
func (d *devBackend) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var first error
	for _, l := range d.all {
		if err := l.eng.close(); err != nil && first == nil {
			first = err
		}
	}
	if d.release != nil {
		if err := d.release(); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("gpu: %s backend: close: %w", d.name, first)
	}
	return nil
}

// Decode decodes and checksums batch on the device. It is safe for
// concurrent use.
func (d *devBackend) Decode(jobs []Job) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	for i := range jobs {
		j := &jobs[i]
		j.RawCRC, j.DataCRC = 0, 0
		j.Compressed, j.CompressErr = false, nil
		_, j.Err = makePlan(j, d.rot, 1)
	}
	err := d.run(jobs)
	if err != nil {
		return fmt.Errorf("gpu: %s backend: %w", d.name, err)
	}
	return nil
}

// run runs the rounds of a batch. It never waits for a lane while holding
// one, so concurrent calls cannot deadlock.
func (d *devBackend) run(jobs []Job) (err error) {
	var pending *lane // the round begun before, not yet finished
	defer func() {
		if pending != nil {
			if e := pending.finish(); err == nil {
				err = e
			}
			d.lanes <- pending
		}
	}()
	for start := 0; start < len(jobs); {
		var l *lane
		if pending == nil {
			l = <-d.lanes
		} else {
			select {
			case l = <-d.lanes:
			default: // no second lane free: finish the pending round and reuse its lane
				l, pending = pending, nil
				if err := l.finish(); err != nil {
					d.lanes <- l
					return err
				}
			}
		}
		next, err := l.begin(jobs, start, d.rot)
		if err != nil {
			l.eng.wait() // let the device finish what it was given before the lane is reused
			l.jobs, l.idx = nil, l.idx[:0]
			d.lanes <- l
			return err
		}
		start = next
		if pending != nil {
			p := pending
			pending = nil
			err := p.finish()
			d.lanes <- p
			if err != nil {
				l.finish()
				d.lanes <- l
				return err
			}
		}
		pending = l
	}
	return nil
}
