package sim

import (
	"fmt"
	"io"
	"runtime"
	"sync"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/source/capture"
)

// TruthKey is the capture metadata field that holds a simulated scan's Truth.
const TruthKey = "simulation"

// ModulesKey is the capture metadata field that holds, in a capture of
// several simulated modules' interleaved frames, the Truth of each module
// (a list, in the order of the modules); such a capture has no TruthKey.
const ModulesKey = "simulation_modules"

// FormatInfo is a frame format as the ground truth spells it.
type FormatInfo = capture.FormatInfo

// Truth is what a simulated scan was meant to deliver, recorded in the
// capture metadata under TruthKey so that a replay can be checked frame by
// frame.
type Truth struct {
	Scene       Scene      `json:"scene"`
	Seed        uint64     `json:"seed"`
	Format      FormatInfo `json:"format"`
	Orientation []int      `json:"orientation,omitempty"`
	Module      uint16     `json:"module"`
	FPS         float64    `json:"fps"`
	StartNS     uint64     `json:"start_ns"`
	Frames      int        `json:"frames"`
	Plan        *plan.Plan `json:"plan,omitempty"` // tomography only
	Faults      Faults     `json:"faults"`
	Records     int        `json:"records"` // records in the capture, duplicates included

	// Per frame, by frame number:
	ImageKey      []int     `json:"image_key,omitempty"`      // tomography: 2 dark, 1 flat, 0 projection
	RotationAngle []float64 `json:"rotation_angle,omitempty"` // tomography: degrees
	DataCRC       []uint32  `json:"data_crc"`                 // CRC-32C of the expected decoded image
	Flags         []uint32  `json:"flags"`                    // header flags (FlagOverflow)
}

// ReadTruth returns the ground truth recorded in a simulated capture's
// metadata.
func ReadTruth(m capture.Metadata) (*Truth, error) {
	var t Truth
	ok, err := m.Get(TruthKey, &t)
	if err != nil {
		return nil, err
	}
	if !ok {
		if _, several := m.Extra[ModulesKey]; several {
			return nil, fmt.Errorf("capture of several simulated modules: their truths are in %q (ReadTruths)", ModulesKey)
		}
		return nil, fmt.Errorf("capture metadata has no %q field: not a simulated capture", TruthKey)
	}
	if len(t.DataCRC) != t.Frames || len(t.Flags) != t.Frames {
		return nil, fmt.Errorf("simulation truth: %d frames but %d data CRCs and %d flags", t.Frames, len(t.DataCRC), len(t.Flags))
	}
	return &t, nil
}

// ReadTruths returns the ground truth of every module a simulated capture
// holds: one for a capture of one module (TruthKey), one per module for a
// capture of several (ModulesKey).
func ReadTruths(m capture.Metadata) ([]*Truth, error) {
	var all []*Truth
	ok, err := m.Get(ModulesKey, &all)
	if err != nil {
		return nil, err
	}
	if !ok {
		t, err := ReadTruth(m)
		if err != nil {
			return nil, err
		}
		return []*Truth{t}, nil
	}
	for _, t := range all {
		if t == nil || len(t.DataCRC) != t.Frames || len(t.Flags) != t.Frames {
			return nil, fmt.Errorf("metadata field %q: a module's truth without a data CRC and flags per frame", ModulesKey)
		}
	}
	return all, nil
}

// truth returns the scan's ground truth with the given per-frame checksums
// and flags.
func (s *Scan) truth(crc, flags []uint32) Truth {
	c := &s.cfg
	f := c.Format
	t := Truth{
		Scene: c.Scene, Seed: c.Seed, Module: c.Module, FPS: c.FPS, StartNS: c.StartNS,
		Format:      capture.NewFormatInfo(f),
		Orientation: c.Orientation,
		Frames:      s.n,
		Faults:      s.faults,
		Records:     s.records(),
		DataCRC:     crc,
		Flags:       flags,
	}
	if c.Scene == Tomo {
		p := c.Plan
		t.Plan = &p
		t.ImageKey = make([]int, s.n)
		t.RotationAngle = make([]float64, s.n)
		for i := range s.n {
			t.ImageKey[i] = s.ImageKey(i)
			t.RotationAngle[i] = s.Angle(i)
		}
	}
	return t
}

// records returns the number of records the capture holds.
func (s *Scan) records() int {
	n := 0
	for _, j := range s.order {
		n += j.copies
	}
	return n
}

// Stats sums up a written capture.
type Stats struct {
	Frames   int   // distinct frames written
	Records  int   // records written, duplicates included
	Overflow int   // frames with FlagOverflow
	Bytes    int64 // bytes of the capture file
}

// WriteCapture simulates the scan and writes it to w as a capture file
// whose metadata is meta plus the Truth under TruthKey. Frames are made in
// parallel on GOMAXPROCS workers and written in order.
//
// If w is an io.WriterAt (an *os.File) every frame is made once and the
// metadata, written first with room for the checksums, is completed at the
// end; otherwise the images are made twice, first for their checksums.
func (s *Scan) WriteCapture(w io.Writer, meta capture.Metadata) (Stats, error) {
	crc := make([]uint32, s.n)
	flags := make([]uint32, s.n)
	record := func(i int, m *made) { crc[i], flags[i] = m.dataCRC, m.flags }
	_, rewrite := w.(io.WriterAt)
	if rewrite {
		// Placeholders at least as wide as any real value.
		for i := range crc {
			crc[i], flags[i] = 1<<32-1, frame.FlagOverflow
		}
	} else {
		all := make([]job, s.n)
		for i := range all {
			all[i] = job{frame: i}
		}
		if err := s.run(all, false, func(j job, m *made) error { record(j.frame, m); return nil }); err != nil {
			return Stats{}, err
		}
	}
	if err := meta.Set(TruthKey, s.truth(crc, flags)); err != nil {
		return Stats{}, err
	}
	cw, err := capture.NewWriter(w, meta)
	if err != nil {
		return Stats{}, err
	}
	var st Stats
	err = s.run(s.order, true, func(j job, m *made) error {
		record(j.frame, m)
		for range j.copies {
			if err := cw.WriteRecord(m.record); err != nil {
				return err
			}
		}
		if j.copies > 0 {
			st.Frames++
			st.Records += j.copies
			if m.flags&frame.FlagOverflow != 0 {
				st.Overflow++
			}
		}
		return nil
	})
	if err == nil {
		err = cw.Close()
	}
	if err == nil && rewrite {
		if err = meta.Set(TruthKey, s.truth(crc, flags)); err == nil {
			err = cw.RewriteMetadata(meta)
		}
	}
	st.Bytes = cw.Size()
	return st, err
}

// slot carries one job through a worker to the consumer.
type slot struct {
	job  job
	buf  []byte
	made made
	err  error
	done chan struct{}
}

// run makes the frames of jobs on GOMAXPROCS workers and hands each to
// consume, one at a time, in the order of jobs. It stops at the first
// error.
func (s *Scan) run(jobs []job, encode bool, consume func(job, *made) error) error {
	workers := max(1, runtime.GOMAXPROCS(0))
	slots := 2 * workers
	free := make(chan *slot, slots)
	for range slots {
		free <- &slot{done: make(chan struct{}, 1)}
	}
	queue := make(chan *slot, slots)
	work := make(chan *slot)
	stop := make(chan struct{})

	go func() { // dispatcher: hands out jobs in order
		defer close(queue)
		defer close(work)
		for _, j := range jobs {
			var sl *slot
			select {
			case sl = <-free:
			case <-stop:
				return
			}
			sl.job = j
			queue <- sl
			work <- sl
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := newGenerator(s)
			for sl := range work {
				if cap(sl.buf) == 0 && encode {
					sl.buf = make([]byte, 0, frame.HeaderSize+s.cfg.Format.PayloadSize())
				}
				sl.made, sl.err = g.frame(sl.job.frame, encode && sl.job.copies > 0, sl.buf)
				sl.done <- struct{}{}
			}
		}()
	}
	var err error
	for sl := range queue {
		<-sl.done
		if err == nil {
			err = sl.err
			if err == nil {
				err = consume(sl.job, &sl.made)
			}
			if err != nil {
				close(stop)
			}
		}
		free <- sl
	}
	wg.Wait()
	return err
}
