package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
)

// TestQueueTakes checks the order in which workers take tasks: each owns
// a run and takes it from the front, a worker whose run is done takes the
// oldest run no one owns, and only where every run left is owned does it
// take from the back of the one with the most tasks left.
func TestQueueTakes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runs    []int32 // tasks of each run
		workers int
		takes   []int  // the worker of each take, in turn
		want    string // "run.task" of each take
	}{
		{"one worker, runs in order", []int32{2, 3}, 1, []int{0, 0, 0, 0, 0}, "0.0 0.1 1.0 1.1 1.2"},
		{"a run each, taken from the front", []int32{3, 3}, 2, []int{0, 1, 0, 1, 0, 1}, "0.0 1.0 0.1 1.1 0.2 1.2"},
		{"the oldest run no one owns next", []int32{1, 3, 2}, 2, []int{0, 1, 0, 0, 1, 1}, "0.0 1.0 2.0 2.1 1.1 1.2"},
		{"every run owned: from the back of the fullest", []int32{4, 2}, 2, []int{0, 1, 1, 1, 0, 0}, "0.0 1.0 1.1 0.3 0.1 0.2"},
		{"one run, two workers", []int32{5}, 2, []int{0, 1, 1, 0, 0}, "0.0 0.4 0.3 0.1 0.2"},
		{"a thief takes the owner's last task", []int32{2}, 2, []int{0, 1, 1}, "0.0 0.1 "},
		{"a thief takes from the owned run with most left", []int32{2, 5, 3}, 3, []int{0, 1, 2, 0, 0, 0, 0, 0, 1, 2}, "0.0 1.0 2.0 0.1 1.4 1.3 1.2 2.2 1.1 2.1"},
		{"runs of one task", []int32{1, 1, 1, 1, 1}, 2, []int{0, 1, 1, 0, 0, 1}, "0.0 1.0 2.0 3.0 4.0 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(tc.workers)
			var b batch
			for i, n := range tc.runs {
				b.runs = append(b.runs, run{b: &b, job: int32(i), end: n, tasks: n})
			}
			q.put(b.runs)
			q.close()
			var got []string
			for _, w := range tc.takes {
				tk, ok := q.take(w)
				if !ok {
					got = append(got, "")
					continue
				}
				if tk.of != tc.runs[tk.job] {
					t.Errorf("task %d.%d says %d tasks, want %d", tk.job, tk.index, tk.of, tc.runs[tk.job])
				}
				got = append(got, fmt.Sprintf("%d.%d", tk.job, tk.index))
				// The queue holds the runs no one owns, so that a take
				// costs the same however many are queued.
				for _, r := range q.runs[q.head:] {
					if r.owner != 0 || r.next != 0 {
						t.Errorf("after task %d.%d: run %d queued, owned by worker %d, %d tasks taken", tk.job, tk.index, r.job, r.owner-1, r.next)
					}
				}
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("takes %q, want %q", s, tc.want)
			}
			if len(q.runs) != 0 {
				t.Errorf("after every task: %d runs queued", len(q.runs))
			}
			for w, r := range q.owns {
				if r != nil {
					t.Errorf("after every task: worker %d owns run %d", w, r.job)
				}
			}
		})
	}
}

// mixedJob is a job of TestCPUConcurrentMixedBatches and what it must
// come out as.
type mixedJob struct {
	kind    string
	image   []byte // the image, transposed where the job asks
	dataCRC uint32 // the image's CRC before any transpose
	chunk   []byte // Encode's chunk, where the job asks for one
}

// TestCPUConcurrentMixedBatches decodes, from several goroutines at once
// on one backend, batches of 1 to 9 frames of mixed geometries (1 x N
// and N x 1 chips, frames of a single band and of one row) and kinds:
// plain, bit-transposed, compressed by bslz4 or bszstd with the image
// kept or discarded, and frames that cannot be decoded. The queue hands
// frames of different callers to the same workers and bands of one frame
// to several; every result must be the frame's own.
func TestCPUConcurrentMixedBatches(t *testing.T) {
	geometries := []frame.Geometry{
		{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 32},
		{ChipsX: 1, ChipsY: 4, ChipWidth: 256, ChipHeight: 16},
		{ChipsX: 4, ChipsY: 1, ChipWidth: 256, ChipHeight: 16},
		{ChipsX: 1, ChipsY: 1, ChipWidth: 256, ChipHeight: 8},
		{ChipsX: 2, ChipsY: 1, ChipWidth: 256, ChipHeight: 1},
	}
	codecs := []struct {
		name  string
		block int
	}{{"bslz4", 0}, {"bszstd", 0}, {"bslz4", 64}, {"bszstd", 16}}
	comps := map[int][]*Compression{} // by pixel size, as codecs
	for _, pix := range []int{2, 4} {
		for _, c := range codecs {
			comps[pix] = append(comps[pix], compression(t, c.name, pix, c.block))
		}
	}
	// job returns a job of a random kind and what it must come out as.
	job := func(rng *rand.Rand, n int) (Job, mixedJob, error) {
		f := frame.Format{Geometry: geometries[rng.IntN(len(geometries))], Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
		if rng.IntN(3) == 0 {
			f.BitDepth = 12
		}
		j := newJob(f, n, randomBytes(rng, f.PayloadSize()))
		plain := refDecode(f, j.Payload, nil)
		m := mixedJob{kind: "plain", image: plain, dataCRC: frame.Checksum(plain)}
		switch k := rng.IntN(5); k {
		case 1:
			j.ShuffleBlock = []int{8, 64, 2048}[rng.IntN(3)]
			m.kind = fmt.Sprint("transposed in blocks of ", j.ShuffleBlock)
			var err error
			m.image, err = bitshuffle.AppendShuffle(nil, plain, f.PixelSize(), j.ShuffleBlock)
			return j, m, err
		case 2:
			j.Payload = j.Payload[1:]
			m.kind = "payload short"
		case 3, 4:
			c := rng.IntN(len(codecs))
			ref := bitshuffleCodec(t, codecs[c].name, f.PixelSize(), codecs[c].block)
			withChunk(&j, comps[f.PixelSize()][c], ref)
			j.DiscardImage = k == 4
			m.kind = fmt.Sprintf("%s, blocks of %d, image discarded %v", codecs[c].name, codecs[c].block, j.DiscardImage)
			var err error
			m.chunk, err = ref.Encode(nil, plain)
			return j, m, err
		}
		return j, m, nil
	}
	var compressed atomic.Int64
	for _, workers := range []int{1, 2, 3, 7, 16} {
		be := newBackend(t, "cpu", Options{Workers: workers})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(workers), uint64(g)))
				for round := range 3 {
					batch := make([]Job, 1+rng.IntN(9))
					want := make([]mixedJob, len(batch))
					for i := range batch {
						var err error
						if batch[i], want[i], err = job(rng, i); err != nil {
							t.Error(err)
							return
						}
					}
					if err := be.Decode(batch); err != nil {
						t.Errorf("%d workers, goroutine %d, round %d: %v", workers, g, round, err)
						return
					}
					for i := range batch {
						j, m := &batch[i], &want[i]
						name := fmt.Sprintf("%d workers, goroutine %d, round %d, frame %d (%v, %s)", workers, g, round, i, j.Header.Format, m.kind)
						checkMixedJob(t, name, j, m)
						if j.Compressed {
							compressed.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
	}
	if compressed.Load() == 0 {
		t.Error("no frame compressed on the decode tasks")
	}
}

// checkMixedJob checks a job of TestCPUConcurrentMixedBatches.
func checkMixedJob(t *testing.T, name string, j *Job, m *mixedJob) {
	t.Helper()
	if m.kind == "payload short" {
		if j.Err == nil || !strings.Contains(j.Err.Error(), "payload of") {
			t.Errorf("%s: error %v, want one saying the payload's size", name, j.Err)
		}
		return
	}
	if j.Err != nil {
		t.Errorf("%s: %v", name, j.Err)
		return
	}
	if j.RawCRC != frame.Checksum(j.Payload) || j.DataCRC != m.dataCRC {
		t.Errorf("%s: CRCs %08x %08x, want %08x %08x", name, j.RawCRC, j.DataCRC, frame.Checksum(j.Payload), m.dataCRC)
	}
	if m.chunk != nil {
		// Where the bands cut blocks, the chunk is left to the caller.
		if j.CompressErr != nil || j.Compressed && !bytes.Equal(j.Chunk, m.chunk) {
			t.Errorf("%s: compressed %v (%v), chunk equal to Encode's %v", name, j.Compressed, j.CompressErr, bytes.Equal(j.Chunk, m.chunk))
		}
		if j.Compressed && j.DiscardImage {
			return
		}
	}
	if !bytes.Equal(j.Image[:j.Header.Format.ImageSize()], m.image) {
		t.Errorf("%s: image differs from the reference's (compressed %v)", name, j.Compressed)
	}
}

// TestCPUCloseWhileDecoding closes a backend while goroutines decode on
// it in a loop: each Decode must either give every frame of its batch
// whole (image, CRCs, chunk) or return ErrClosed having touched nothing,
// Close must return once the workers have stopped, and Close again and
// Decode after it must answer as after any Close.
func TestCPUCloseWhileDecoding(t *testing.T) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 64}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	ref := bitshuffleCodec(t, "bslz4", 4, 0)
	c := compression(t, "bslz4", 4, 0)
	rng := rand.New(rand.NewPCG(92, 93))
	const frames = 4
	var payloads, images, chunks [frames][]byte
	for i := range frames {
		payloads[i] = randomBytes(rng, f.PayloadSize())
		images[i] = refDecode(f, payloads[i], nil)
		var err error
		if chunks[i], err = ref.Encode(nil, images[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, workers := range []int{1, 2, 7} {
		for trial := range 5 {
			be, err := New("cpu", Options{Workers: workers})
			if err != nil {
				t.Fatal(err)
			}
			const callers = 3
			var wg sync.WaitGroup
			decoded := make(chan struct{}, callers) // one from each caller, once it has decoded a batch
			for g := range callers {
				wg.Go(func() {
					for round := 0; ; round++ {
						batch := make([]Job, 1+(g+round)%frames)
						for i := range batch {
							batch[i] = newJob(f, i, payloads[i])
							batch[i].ShuffleBlock = (i % 2) * 64 // every other frame transposed after the decode
							if i%2 == 0 {
								withChunk(&batch[i], c, ref)
							}
						}
						err := be.Decode(batch)
						if errors.Is(err, ErrClosed) {
							for i := range batch {
								if batch[i].RawCRC != 0 || batch[i].Compressed || !bytes.Equal(batch[i].Image, newJob(f, i, nil).Image) {
									t.Errorf("%d workers, trial %d: a batch refused after Close was decoded", workers, trial)
								}
							}
							return
						}
						if err != nil {
							t.Errorf("%d workers, trial %d: %v", workers, trial, err)
							return
						}
						for i := range batch {
							j := &batch[i]
							name := fmt.Sprintf("%d workers, trial %d, goroutine %d, round %d, frame %d", workers, trial, g, round, i)
							want := images[i]
							if j.ShuffleBlock != 0 {
								// DataCRC is the plain image's; checkJob holds it to want's.
								if j.DataCRC != frame.Checksum(want) {
									t.Errorf("%s: DataCRC %08x, want the plain image's %08x", name, j.DataCRC, frame.Checksum(want))
								}
								want, _ = bitshuffle.AppendShuffle(nil, images[i], f.PixelSize(), j.ShuffleBlock)
								j.DataCRC = frame.Checksum(want)
							}
							checkJob(t, name, j, want)
							if i%2 == 0 && (!j.Compressed || !bytes.Equal(j.Chunk, chunks[i])) {
								t.Errorf("%s: compressed %v (%v), chunk equal to Encode's %v", name, j.Compressed, j.CompressErr, bytes.Equal(j.Chunk, chunks[i]))
							}
						}
						if round == 0 {
							decoded <- struct{}{}
						}
					}
				})
			}
			for range callers {
				<-decoded
			}
			if err := be.Close(); err != nil {
				t.Errorf("Close while decoding: %v", err)
			}
			wg.Wait()
			if err := be.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if err := be.Decode(nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Decode after Close: %v, want ErrClosed", err)
			}
			if q := be.(*cpu).q; len(q.runs) != 0 || slices.ContainsFunc(q.owns, func(r *run) bool { return r != nil }) {
				t.Errorf("%d workers, trial %d: after Close, %d runs queued, owned %v", workers, trial, len(q.runs), q.owns)
			}
		}
	}
}

// TestCPUConcurrentAllocs checks that decoding allocates nothing per frame
// once warm with several callers at once, each with a batch of its own:
// frames compressed on the decode tasks, transposed after them and plain.
func TestCPUConcurrentAllocs(t *testing.T) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 64}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	rng := rand.New(rand.NewPCG(94, 95))
	ref := bitshuffleCodec(t, "bslz4", 4, 0)
	c := compression(t, "bslz4", 4, 0)
	const callers = 3
	for _, workers := range []int{1, 2, 7} {
		be := newBackend(t, "cpu", Options{Workers: workers})
		var batches, chunks [callers][]Job
		for g := range callers {
			for i := range 1 + g {
				j := newJob(f, i, randomBytes(rng, f.PayloadSize()))
				switch i % 3 {
				case 0:
					withChunk(&j, c, ref)
				case 1:
					j.ShuffleBlock = 64
				}
				batches[g] = append(batches[g], j)
			}
			chunks[g] = slices.Clone(batches[g])
		}
		var start [callers]chan struct{}
		done := make(chan error)
		for g := range callers {
			start[g] = make(chan struct{})
			go func() {
				for range start[g] {
					for i := range batches[g] {
						batches[g][i].Chunk = chunks[g][i].Chunk
					}
					err := be.Decode(batches[g])
					for i := range batches[g] {
						if err == nil && batches[g][i].Compress != nil && !batches[g][i].Compressed {
							err = fmt.Errorf("frame %d not compressed: %v", i, batches[g][i].CompressErr)
						}
					}
					done <- err
				}
			}()
		}
		round := func() {
			for g := range callers {
				start[g] <- struct{}{}
			}
			for range callers {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		}
		for range 8 { // every worker makes its encoder
			round()
		}
		allocs := testing.AllocsPerRun(20, round)
		for g := range callers {
			close(start[g])
		}
		if allocs != 0 {
			t.Errorf("%d workers, %d callers at once: %v allocations a round, want 0", workers, callers, allocs)
		}
	}
}

// BenchmarkCPUBatchSize decodes batches of 10 to 10,000 small frames (one
// task each) on two workers, and reports the time a frame: it stays the
// same as the batch grows, as each take from the queue costs the same
// however many frames are queued.
func BenchmarkCPUBatchSize(b *testing.B) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 1, ChipsY: 1, ChipWidth: 64, ChipHeight: 1}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	rng := rand.New(rand.NewPCG(96, 97))
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprint(n, " frames"), func(b *testing.B) {
			be := newBackend(b, "cpu", Options{Workers: 2})
			batch := make([]Job, n)
			for i := range batch {
				batch[i] = newJob(f, i, randomBytes(rng, f.PayloadSize()))
			}
			for b.Loop() {
				if err := be.Decode(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/frame")
		})
	}
}
