package gpu

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"unsafe"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
)

// cpu is the pure-Go backend. A fixed pool of workers takes tasks (bands of
// chip rows, see plan) from one queue, frame by frame; Decode plans a
// batch, queues its tasks, waits for them and combines the piece CRCs.
type cpu struct {
	rot     frame.Orientation
	workers int
	q       *queue

	mu     sync.RWMutex // read-held by Decode, write-held by Close
	closed bool
	done   sync.WaitGroup // the workers

	freeMu sync.Mutex
	free   []*batch // batch states for reuse, so Decode allocates nothing
}

// task is one of the of tasks of a job of a batch, the index-th in image
// order: a band of one chip row (index = chip row * plan.bands + band), or,
// once the batch is decoded, the index-th of of runs of bitshuffle blocks
// of the image.
type task struct {
	b         *batch
	job       int32
	index, of int32
	shuffle   bool
}

// shuffleTasksPerWorker is how many runs of blocks each worker gets of an
// image to transpose, so that workers finishing early take more.
const shuffleTasksPerWorker = 4

// batch is the state of one Decode call.
type batch struct {
	jobs   []Job
	plans  []plan
	ok     []bool
	crcs   []uint32    // piece CRCs of every frame, at plan.crcs
	bands  []bandChunk // the compressed bands of the frames that ask, at plan.bandsAt
	chunks []chunkJoin // the chunk of each job that asks, put together
	runs   []run       // the jobs' tasks, queued
	wg     sync.WaitGroup
}

// CPUInstructions names the widest instructions the cpu backend decodes
// bitplane frames with on this machine, chosen once at start from
// the CPU's features: "AVX-512 VBMI+GFNI", "AVX2" or "portable Go". Every
// path gives the same pixels. CPUDecodePaths names those of every
// encoding.
func CPUInstructions() string { return cpuInstructions() }

// DecodePath is how the cpu backend decodes the frames of some encodings
// on this machine.
type DecodePath struct {
	Encodings    string // the encodings and bit depths, as frame.Format names them
	Instructions string // the widest instructions their decode uses
}

// CPUDecodePaths lists, for every encoding, the widest instructions the
// cpu backend decodes it with on this machine, chosen once at start from
// the CPU's features.
func CPUDecodePaths() []DecodePath { return cpuDecodePaths() }

// String says "ENCODINGS: INSTRUCTIONS".
func (d DecodePath) String() string { return d.Encodings + ": " + d.Instructions }

// decodePathsString joins the paths, "; " between them, for a log line.
func decodePathsString() string {
	var b strings.Builder
	for i, d := range CPUDecodePaths() {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(d.String())
	}
	return b.String()
}

func newCPU(opts Options) *cpu {
	c := &cpu{
		rot:     opts.Orientation,
		workers: opts.workers(),
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Debug("cpu decode", "instructions", CPUInstructions(), "by_encoding", decodePathsString(), "workers", c.workers)
	c.q = newQueue(c.workers)
	c.done.Add(c.workers)
	for i := range c.workers {
		go c.work(i)
	}
	return c
}

// Name returns "cpu".
func (c *cpu) Name() string { return "cpu" }

// Close stops the workers once Decode calls in progress return.
func (c *cpu) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.q.close()
	c.done.Wait()
	return nil
}

// Decode decodes and checksums batch on the workers. It is safe for
// concurrent use.
func (c *cpu) Decode(jobs []Job) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	b := c.getBatch()
	n := b.prepare(jobs, c.rot, c.workers)
	b.wg.Add(n)
	b.runs = b.runs[:0]
	for j := range b.jobs {
		if b.ok[j] {
			t := int32(b.plans[j].tasks())
			b.runs = append(b.runs, run{b: b, job: int32(j), end: t, tasks: t})
		}
	}
	c.q.put(b.runs)
	b.wg.Wait()
	b.finish()
	c.shuffle(b)
	c.putBatch(b)
	return nil
}

// shuffle bit-transposes the decoded images whose jobs ask for it and whose
// bands the decode tasks have not transposed already, in place block by
// block, on the workers. The image CRCs are already taken.
func (c *cpu) shuffle(b *batch) {
	b.runs = b.runs[:0]
	for j := range b.jobs {
		job := &b.jobs[j]
		if !b.ok[j] || job.ShuffleBlock == 0 || b.plans[j].bandShuffle {
			continue
		}
		blocks := shuffleBlocks(&b.plans[j].f, job.ShuffleBlock)
		n := int32(min(blocks, shuffleTasksPerWorker*c.workers))
		b.wg.Add(int(n))
		b.runs = append(b.runs, run{b: b, job: int32(j), end: n, tasks: n, shuffle: true})
	}
	c.q.put(b.runs)
	b.wg.Wait()
}

// shuffleBlocks returns the number of bitshuffle blocks, the partial one
// included, of an image of format f in blocks of blockElems pixels.
func shuffleBlocks(f *frame.Format, blockElems int) int {
	full, partial, _ := bitshuffle.Split(f.Pixels(), blockElems)
	return full + min(partial, 1)
}

// shuffleRun transposes blocks [first, end) of job j's image in place
// through scratch, which it returns grown to a block.
func shuffleRun(j *Job, p *plan, first, end int, scratch []byte) []byte {
	bs := j.ShuffleBlock
	full, partial, _ := bitshuffle.Split(p.f.Pixels(), bs)
	scratch = grow(scratch, bs*p.pix)
	for k := first; k < end; k++ {
		size := bs * p.pix
		if k == full {
			size = partial * p.pix
		}
		blk := j.Image[k*bs*p.pix : k*bs*p.pix+size]
		copy(scratch, blk)
		bitshuffle.ShuffleBlock(blk, scratch[:size], p.pix)
	}
	return scratch
}

func (c *cpu) getBatch() *batch {
	c.freeMu.Lock()
	defer c.freeMu.Unlock()
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b
	}
	return new(batch)
}

func (c *cpu) putBatch(b *batch) {
	b.jobs = nil
	c.freeMu.Lock()
	c.free = append(c.free, b)
	c.freeMu.Unlock()
}

// prepare plans every job, setting Err on those that cannot be decoded and
// clearing the results of the others, and returns the number of tasks.
func (b *batch) prepare(jobs []Job, rot frame.Orientation, workers int) int {
	b.jobs = jobs
	b.plans = grow(b.plans, len(jobs))
	b.ok = grow(b.ok, len(jobs))
	tasks, pieces, bands := 0, 0, 0
	for j := range jobs {
		job := &jobs[j]
		job.RawCRC, job.DataCRC = 0, 0
		job.Compressed, job.CompressErr = false, nil
		p, err := makePlan(job, rot, workers)
		job.Err = err
		b.ok[j] = err == nil
		if err != nil {
			continue
		}
		p.crcs = pieces
		if p.compress {
			p.bandsAt = bands
			bands += p.tasks()
		}
		b.plans[j] = p
		tasks += p.tasks()
		pieces += p.pieces()
	}
	b.crcs = grow(b.crcs, pieces)
	b.bands = grow(b.bands, bands)
	for i := range b.bands {
		b.bands[i] = bandChunk{}
	}
	if cap(b.chunks) < len(jobs) {
		b.chunks = make([]chunkJoin, len(jobs))
	}
	b.chunks = b.chunks[:len(jobs)]
	for j := range b.chunks {
		b.chunks[j].reset()
	}
	return tasks
}

// finish sets the CRCs of the decoded jobs, and the chunks of those whose
// bands were compressed.
func (b *batch) finish() {
	for j := range b.jobs {
		if !b.ok[j] {
			continue
		}
		job, p := &b.jobs[j], &b.plans[j]
		job.RawCRC, job.DataCRC = p.combine(b.crcs)
		if !p.compress {
			continue
		}
		cj := &b.chunks[j]
		if cj.err != nil {
			job.Chunk, job.CompressErr = job.Chunk[:0], cj.err
			continue
		}
		job.Chunk, job.Compressed = job.Chunk[:cj.at], true
	}
}

// chunkJoin puts the compressed bands of a job's chunk together, in image
// order, as the tasks finish them. A band whose place is known when its
// task starts (every band before it in place) is compressed there; any
// other is compressed at the start of its own part of the chunk buffer,
// from the encoder's Bound of the bytes before it to that of the bytes up
// to its end, and moved into place by the task that finishes the last
// band before it.
type chunkJoin struct {
	mu   sync.Mutex
	next int   // the first band not in place
	at   int   // the end of the bands in place, with the chunk's header
	err  error // the first band's error; no band is placed after it
}

// reset readies j for the chunk of another job.
func (j *chunkJoin) reset() { j.next, j.at, j.err = 0, 0, nil }

// bandChunk is where a task left its band's compressed blocks in the
// job's chunk buffer, or why it could not.
type bandChunk struct {
	off, n int
	err    error
	done   bool
}

// compressBand compresses image bytes [start, end) of job j, band i of
// its plan p, a band holding whole blocks or running to the image's end,
// into the job's chunk buffer (see chunkJoin).
func (bt *batch) compressBand(j int, p *plan, i, start, end int, band []byte, w *worker) {
	job := &bt.jobs[j]
	cj := &bt.chunks[j]
	bands := bt.bands[p.bandsAt : p.bandsAt+p.tasks()]
	cj.mu.Lock()
	inPlace, at := cj.next == i, cj.at
	cj.mu.Unlock()
	bc := encodeBand(job, start, end, band, inPlace, at, w)
	bc.done = true
	chunk := job.Chunk[:cap(job.Chunk)]
	cj.mu.Lock()
	defer cj.mu.Unlock()
	bands[i] = bc
	for cj.next < len(bands) && bands[cj.next].done {
		b := &bands[cj.next]
		switch {
		case cj.err != nil:
		case b.err != nil:
			cj.err = b.err
		default:
			if b.off != cj.at {
				copy(chunk[cj.at:], chunk[b.off:b.off+b.n])
			}
			cj.at += b.n
		}
		cj.next++
	}
}

// encodeBand compresses image bytes [start, end) of job j into its chunk
// buffer, at at where inPlace is set, else at the start of the band's own
// part of the buffer.
func encodeBand(j *Job, start, end int, band []byte, inPlace bool, at int, w *worker) bandChunk {
	enc, err := w.encoder(j.Compress)
	if err != nil {
		return bandChunk{err: err}
	}
	size := j.Header.Format.ImageSize()
	if need := enc.Bound(size); cap(j.Chunk) < need {
		return bandChunk{err: fmt.Errorf("gpu: frame %d: chunk buffer of %d bytes, the chunk may need %d", j.Header.FrameNumber, cap(j.Chunk), need)}
	}
	off, room := 0, enc.Bound(end)
	if start > 0 {
		off = enc.Bound(start)
		room -= off
	}
	if inPlace {
		off = at
	}
	if room < 0 || off+room > cap(j.Chunk) {
		// An encoder whose Bound does not grow with the bytes bounded.
		return bandChunk{err: fmt.Errorf("gpu: frame %d: image bytes %d to %d bounded by %d bytes at offset %d, outside the chunk buffer of %d", j.Header.FrameNumber, start, end, room, off, cap(j.Chunk))}
	}
	chunk := j.Chunk[:cap(j.Chunk)]
	dst := chunk[off : off : off+room]
	if start == 0 {
		dst = enc.AppendHeader(dst, size)
	}
	out, err := enc.AppendBlocks(dst, band)
	if err != nil {
		return bandChunk{err: fmt.Errorf("gpu: frame %d: compress image bytes %d to %d: %w", j.Header.FrameNumber, start, end, err)}
	}
	if len(out) > 0 && unsafe.SliceData(out) != unsafe.SliceData(dst) {
		// The encoder grew the buffer past its Bound: bring the bytes back.
		if len(out) > room {
			return bandChunk{err: fmt.Errorf("gpu: frame %d: image bytes %d to %d compressed to %d bytes, above the encoder's bound of %d", j.Header.FrameNumber, start, end, len(out), room)}
		}
		copy(chunk[off:off+room], out)
	}
	return bandChunk{off: off, n: len(out)}
}

// grow returns s resized to n, reusing its array when it is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// worker is what one worker goroutine keeps for as long as it runs: a
// scratch row of counts, a scratch block of pixels, and its chunk encoders
// of the last few Compressions it compressed for (a backend shared by the
// pipelines of several modules sees as many at once).
type worker struct {
	counts  []uint32
	scratch []byte
	band    []byte // a band of an image the caller has no use for (Job.DiscardImage)
	encs    [4]workerEncoder
	next    int // the entry of encs to replace next
}

type workerEncoder struct {
	c   *Compression
	enc ChunkEncoder
}

// encoder returns the worker's encoder for c, made the first time.
func (w *worker) encoder(c *Compression) (ChunkEncoder, error) {
	for i := range w.encs {
		if w.encs[i].c == c {
			return w.encs[i].enc, nil
		}
	}
	enc, err := c.NewEncoder()
	if err != nil {
		return nil, fmt.Errorf("gpu: make chunk encoder: %w", err)
	}
	w.encs[w.next] = workerEncoder{c, enc}
	w.next = (w.next + 1) % len(w.encs)
	return enc, nil
}

// work runs the tasks of worker i until the queue closes.
func (c *cpu) work(i int) {
	defer c.done.Done()
	var w worker
	for {
		t, ok := c.q.take(i)
		if !ok {
			return
		}
		p := &t.b.plans[t.job]
		if t.shuffle {
			blocks, k, n := shuffleBlocks(&p.f, t.b.jobs[t.job].ShuffleBlock), int(t.index), int(t.of)
			w.scratch = shuffleRun(&t.b.jobs[t.job], p, blocks*k/n, blocks*(k+1)/n, w.scratch)
		} else {
			w.counts = grow(w.counts, p.f.ChipWidth)
			band := int(t.index) % p.bands
			p.run(t.b, int(t.job), int(t.index)/p.bands, band, &w)
		}
		t.b.wg.Done()
	}
}

// CompressesChunks marks the cpu backend as a Compressor.
func (c *cpu) CompressesChunks() {}
