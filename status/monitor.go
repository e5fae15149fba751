// Package status shows running scans to people and programs: an HTTP
// server with a live status page, its data as /status.json, a preview of
// the latest frame and the Prometheus metrics; and, after a scan, a report
// page with the throughput over time that a person can attach to a logbook.
//
// A Monitor follows one module's scan. It samples the pipeline's progress
// once a second, from its own goroutine, and computes everything else when
// it is asked, so that watching a scan costs the pipeline nothing but the
// counters of package instrument.
package status

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"h5ingest/instrument"
	"h5ingest/pipeline"
)

// Scan describes one module's scan, as the page and the report show it.
type Scan struct {
	ID          string `json:"id"`
	Module      int    `json:"module"`
	Output      string `json:"output"`
	Plan        string `json:"plan"`
	Planned     int    `json:"planned"` // frames in the plan; 0: not known
	Format      string `json:"format"`
	Backend     string `json:"backend"`
	Compression string `json:"compression"`
	RingSlots   int    `json:"ring_slots"` // slots of the receive ring; 0: none (a replay)
}

// Sample is a scan's state at one moment.
type Sample struct {
	At       time.Duration     // since the scan started
	Progress pipeline.Progress // the pipeline's counts
	HeldBack time.Duration     // time the sender was held back so far
}

// SampleInterval is how often a Monitor samples its scan.
const SampleInterval = time.Second

// Monitor follows one module's scan. Its methods are safe for concurrent
// use.
type Monitor struct {
	scan     Scan
	progress func() pipeline.Progress
	stages   *instrument.Stages

	mu       sync.Mutex
	heldBack func() time.Duration
	start    time.Time
	end      time.Time // zero while running
	samples  []Sample
	stop     chan struct{}
	done     chan struct{}
}

// NewMonitor returns a monitor of scan, whose pipeline progress reports;
// stages are its instrumented stages, or nil.
func NewMonitor(scan Scan, progress func() pipeline.Progress, stages *instrument.Stages) *Monitor {
	return &Monitor{scan: scan, progress: progress, stages: stages}
}

// SetHeldBack gives the monitor the source's time held back so far (the
// ring of a fabric stream), read at each sample.
func (m *Monitor) SetHeldBack(f func() time.Duration) {
	m.mu.Lock()
	m.heldBack = f
	m.mu.Unlock()
}

// Scan returns the description of the scan.
func (m *Monitor) Scan() Scan { return m.scan }

// Start starts sampling, once a second until Stop.
func (m *Monitor) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		return
	}
	m.start = time.Now()
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	m.samples = append(m.samples, m.sampleLocked())
	go m.run(m.stop, m.done)
}

func (m *Monitor) run(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			m.mu.Lock()
			m.samples = append(m.samples, m.sampleLocked())
			m.mu.Unlock()
		}
	}
}

// Stop takes a last sample and ends sampling: the scan is over.
func (m *Monitor) Stop() {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.mu.Unlock()
	if stop == nil {
		return
	}
	select {
	case <-stop:
		return // stopped before
	default:
	}
	close(stop)
	<-done
	m.mu.Lock()
	m.samples = append(m.samples, m.sampleLocked())
	m.end = time.Now()
	m.mu.Unlock()
}

func (m *Monitor) sampleLocked() Sample {
	s := Sample{At: time.Since(m.start), Progress: m.progress()}
	if m.heldBack != nil {
		s.HeldBack = m.heldBack()
	}
	return s
}

// Samples returns the samples taken so far, one a second.
func (m *Monitor) Samples() []Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Sample(nil), m.samples...)
}

// Status is what the status page shows of one scan: /status.json holds one
// per module.
type Status struct {
	Scan    Scan    `json:"scan"`
	State   string  `json:"state"`   // "starting", "running" or "finished"
	Elapsed float64 `json:"elapsed"` // seconds since the scan started

	Frames      int `json:"frames"` // frames of the scan: the plan's, or those seen so far
	Received    int `json:"received"`
	Written     int `json:"written"`
	OK          int `json:"ok"`
	Pending     int `json:"pending"`   // while running: not received yet, not yet due
	Missing     int `json:"missing"`   // while running: passed by the missing gap; at the end: not received
	Discarded   int `json:"discarded"` // arrived, but the scan was cancelled before it could write them
	CRCMismatch int `json:"crc_mismatch"`
	Rejected    int `json:"rejected"`
	Duplicate   int `json:"duplicate"`
	OutOfRange  int `json:"out_of_range"`
	NotFrame    int `json:"not_frame"`
	Overflow    int `json:"pipeline_full"` // dropped because the pipeline was full (--drop-when-full)

	FrameRate     float64 `json:"frame_rate"`      // frames written per second, over the last second
	MeanFrameRate float64 `json:"mean_frame_rate"` // frames written per second since the start
	InputMBps     float64 `json:"input_mbps"`      // payload MB/s, over the last second
	StoredMBps    float64 `json:"stored_mbps"`     // compressed MB/s, over the last second
	Ratio         float64 `json:"ratio"`           // compression ratio so far
	StoredBytes   int64   `json:"stored_bytes"`
	HeldBack      float64 `json:"held_back"` // seconds the sender was held back

	InFlight      int64   `json:"in_flight"`       // frames held by the pipeline (ring slots in use)
	DecodeMs      float64 `json:"decode_ms"`       // mean ms per decode batch
	CompressMs    float64 `json:"compress_ms"`     // mean ms per frame compressed
	WriteMs       float64 `json:"write_ms"`        // mean ms per chunk written
	PreviewFrame  uint64  `json:"preview_frame"`   // frame number of the preview
	PreviewSeq    uint64  `json:"preview_seq"`     // changes when the preview does; 0: none yet
	SamplesPerSec float64 `json:"samples_per_sec"` // how often the rates are refreshed
}

// Status returns the scan's state now.
func (m *Monitor) Status() Status {
	m.mu.Lock()
	var last, prev Sample
	n := len(m.samples)
	if n > 0 {
		last = m.samples[n-1]
		prev = last
	}
	for i := n - 2; i >= 0; i-- { // the last interval of at least half a sample
		if prev = m.samples[i]; last.At-prev.At >= SampleInterval/2 {
			break
		}
	}
	state := "starting"
	switch {
	case !m.end.IsZero():
		state = "finished"
	case m.stop != nil:
		state = "running"
	}
	var p pipeline.Progress
	elapsed := 0.0
	if m.stop != nil {
		p = m.progress()
		elapsed = time.Since(m.start).Seconds()
		if !m.end.IsZero() {
			p = last.Progress
			elapsed = last.At.Seconds()
		}
	}
	var now *pipeline.Progress
	var ref Sample
	if m.end.IsZero() && m.stop != nil {
		for i := n - 1; i >= 0; i-- {
			if ref = m.samples[i]; elapsed-ref.At.Seconds() >= SampleInterval.Seconds()/2 {
				now = &p
				break
			}
		}
	}
	heldBack := last.HeldBack
	if m.end.IsZero() && m.heldBack != nil {
		heldBack = m.heldBack()
	}
	frames := p.Planned
	m.mu.Unlock()

	if frames == 0 {
		frames = p.Received - p.Duplicate - p.OutOfRange
	}
	s := Status{
		Scan: m.scan, State: state, Elapsed: elapsed, Frames: frames,
		Received: p.Received, Written: p.Written, OK: p.OK, Pending: p.Pending, Missing: p.Missing, Discarded: p.Discarded,
		CRCMismatch: p.CRCMismatch, Rejected: p.Rejected, Duplicate: p.Duplicate,
		OutOfRange: p.OutOfRange, NotFrame: p.NotFrame, Overflow: p.Overflow,
		Ratio: finite(p.Ratio()), StoredBytes: p.StoredBytes, HeldBack: heldBack.Seconds(),
		SamplesPerSec: 1 / SampleInterval.Seconds(),
	}
	if elapsed > 0 {
		s.MeanFrameRate = float64(p.Written) / elapsed
	}
	if dt := (last.At - prev.At).Seconds(); dt > 0 {
		s.FrameRate = float64(last.Progress.Written-prev.Progress.Written) / dt
		s.InputMBps = float64(last.Progress.RawBytes-prev.Progress.RawBytes) / dt / 1e6
		s.StoredMBps = float64(last.Progress.StoredBytes-prev.Progress.StoredBytes) / dt / 1e6
	}
	if now != nil { // running: from the last sample at least half a second old to now
		dt := elapsed - ref.At.Seconds()
		s.FrameRate = float64(p.Written-ref.Progress.Written) / dt
		s.InputMBps = float64(p.RawBytes-ref.Progress.RawBytes) / dt / 1e6
		s.StoredMBps = float64(p.StoredBytes-ref.Progress.StoredBytes) / dt / 1e6
	}
	if st := m.stages; st != nil {
		s.InFlight = int64(instrument.Value(st.SourceInFlight))
		s.DecodeMs = meanMs(st.DecodeSeconds)
		s.CompressMs = meanMs(st.CompressSeconds)
		s.WriteMs = meanMs(st.WriteSeconds)
		s.PreviewSeq, s.PreviewFrame = st.Preview.Seq()
	}
	return s
}

func meanMs(h prometheus.Histogram) float64 { return finite(instrument.Snapshot(h).Mean() * 1e3) }

// finite maps infinities and NaN, which JSON cannot hold, to 0.
func finite(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}
