// Package instrument wraps the stages of an ingest pipeline (its Source,
// decode Backend, chunk Codec and Sink) in types that implement the same
// interfaces and count and time what passes through them, in Prometheus
// metrics of client_golang. The stage code itself knows nothing of metrics.
//
// The wrappers allocate nothing per frame: client_golang's counters and
// fixed-bucket histograms are updated with atomic operations, a few tens of
// nanoseconds per frame, so a command may wrap every pipeline and register
// the metrics only when someone watches. The Backend wrapper also keeps a
// copy of a recently decoded image, once its Preview is enabled, at most one
// every PreviewInterval; it never waits for a reader of it.
package instrument

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
)

// Stages holds the metrics of one pipeline and makes the wrappers that
// update them. Every field is set by New; Register shows them in a
// registry.
type Stages struct {
	SourceFrames   prometheus.Counter   // frames the source handed out
	SourceBytes    prometheus.Counter   // their payload bytes
	SourceWait     prometheus.Histogram // seconds per Next call
	SourceInFlight prometheus.Gauge     // frames handed out, not yet released

	DecodeFrames  prometheus.Counter   // frames decoded
	DecodeErrors  prometheus.Counter   // frames the backend could not decode
	DecodeBytes   prometheus.Counter   // payload bytes given to the backend
	DecodeSeconds prometheus.Histogram // seconds per Decode call (one batch)

	CompressFrames  prometheus.Counter   // chunks encoded
	CompressIn      prometheus.Counter   // image bytes encoded
	CompressOut     prometheus.Counter   // chunk bytes out
	CompressSeconds prometheus.Histogram // seconds per Encode call

	ProcessFrames  prometheus.Counter   // images a processor stage worked on
	ProcessErrors  prometheus.Counter   // images it failed on (recorded missing)
	ProcessSeconds prometheus.Histogram // seconds per Process call

	WriteFrames  prometheus.Counter    // chunks written
	WriteBytes   prometheus.Counter    // chunk bytes written
	WriteSeconds prometheus.Histogram  // seconds per WriteChunk call
	Records      [4]prometheus.Counter // records stored, by frame status 0..3

	// Preview keeps a recent decoded image.
	Preview *Preview

	all []prometheus.Collector // every metric above, and the compression ratio
}

// statusNames are the record status label values, by frame status.
var statusNames = [4]string{
	frame.StatusOK:          "ok",
	frame.StatusMissing:     "missing",
	frame.StatusCRCMismatch: "crc_mismatch",
	frame.StatusRejected:    "rejected",
}

// LatencyBuckets are the upper bounds, in seconds, of the stage timing
// histograms: 10 µs to about 10 s, doubling.
var LatencyBuckets = prometheus.ExponentialBuckets(10e-6, 2, 21)

// New returns the stage metrics of one pipeline, not registered yet, and
// a preview that keeps nothing until enabled.
func New() *Stages {
	s := &Stages{Preview: NewPreview(0)}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		s.all = append(s.all, c)
		return c
	}
	histogram := func(name, help string) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: LatencyBuckets})
		s.all = append(s.all, h)
		return h
	}
	s.SourceFrames = counter("h5ingest_source_frames_total", "Frames the source handed to the pipeline.")
	s.SourceBytes = counter("h5ingest_source_bytes_total", "Payload bytes of the frames the source handed to the pipeline.")
	s.SourceWait = histogram("h5ingest_source_next_seconds", "Time the pipeline waited for each frame from the source.")
	s.SourceInFlight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "h5ingest_source_frames_in_flight",
		Help: "Frames the source handed out and the pipeline has not released: ring slots in use for a fabric stream."})
	s.all = append(s.all, s.SourceInFlight)
	s.DecodeFrames = counter("h5ingest_decode_frames_total", "Frames decoded.")
	s.DecodeErrors = counter("h5ingest_decode_errors_total", "Frames the backend could not decode (recorded as rejected).")
	s.DecodeBytes = counter("h5ingest_decode_bytes_total", "Payload bytes given to the decode backend.")
	s.DecodeSeconds = histogram("h5ingest_decode_batch_seconds", "Time to decode and checksum one batch of frames.")
	s.CompressFrames = counter("h5ingest_compress_frames_total", "Chunks compressed.")
	s.CompressIn = counter("h5ingest_compress_bytes_in_total", "Image bytes compressed.")
	s.CompressOut = counter("h5ingest_compress_bytes_out_total", "Compressed chunk bytes.")
	s.CompressSeconds = histogram("h5ingest_compress_frame_seconds", "Time to compress one frame.")
	s.ProcessFrames = counter("h5ingest_process_frames_total", "Images the processor stage worked on.")
	s.ProcessErrors = counter("h5ingest_process_errors_total", "Images the processor stage failed on (not written, recorded missing).")
	s.ProcessSeconds = histogram("h5ingest_process_frame_seconds", "Time the processor stage took on one image.")
	s.WriteFrames = counter("h5ingest_write_frames_total", "Chunks written to the file.")
	s.WriteBytes = counter("h5ingest_write_bytes_total", "Chunk bytes written to the file.")
	s.WriteSeconds = histogram("h5ingest_write_frame_seconds", "Time to write one chunk to the file.")
	for st, name := range statusNames {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "h5ingest_records_total",
			Help: "Frame records stored in the file, by status.", ConstLabels: prometheus.Labels{"status": name}})
		s.Records[st] = c
		s.all = append(s.all, c)
	}
	s.all = append(s.all, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "h5ingest_compress_ratio",
		Help: "Image bytes over compressed bytes so far."}, func() float64 {
		if out := Value(s.CompressOut); out > 0 {
			return Value(s.CompressIn) / out
		}
		return 0
	}))
	return s
}

// Register adds the metrics to reg, each with the label module.
func (s *Stages) Register(reg prometheus.Registerer, module int) error {
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"module": strconv.Itoa(module)}, reg)
	for _, c := range s.all {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register the stage metrics of module %d: %w", module, err)
		}
	}
	return nil
}

// Unregister takes the metrics Register added to reg out of it again.
func (s *Stages) Unregister(reg prometheus.Registerer, module int) {
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"module": strconv.Itoa(module)}, reg)
	for _, c := range s.all {
		reg.Unregister(c)
	}
}

// observe records the time since start in h, in seconds.
func observe(h prometheus.Histogram, start time.Time) { h.Observe(time.Since(start).Seconds()) }

// Source returns src, counted. The result implements
// pipeline.HostMemorySource and pipeline.HostBufferSource where src does,
// and pipeline.OverwritingSource always (Intact).
func (s *Stages) Source(src pipeline.Source) pipeline.Source {
	w := &source{src, s}
	m, mem := src.(pipeline.HostMemorySource)
	b, bufs := src.(pipeline.HostBufferSource)
	switch {
	case mem && bufs:
		return struct {
			*source
			hostMemory
			hostBuffers
		}{w, m, b}
	case mem:
		return struct {
			*source
			hostMemory
		}{w, m}
	case bufs:
		return struct {
			*source
			hostBuffers
		}{w, b}
	}
	return w
}

// hostMemory is the method of pipeline.HostMemorySource, to embed beside a
// counted source.
type hostMemory interface{ HostMemory() [][]byte }

// hostBuffers is the method of pipeline.HostBufferSource, likewise.
type hostBuffers interface {
	ReadIntoHost(gpu.HostAllocator) func()
}

type source struct {
	pipeline.Source
	s *Stages
}

func (w *source) Next(ctx context.Context) (*pipeline.Frame, error) {
	start := time.Now()
	f, err := w.Source.Next(ctx)
	observe(w.s.SourceWait, start)
	if err == nil {
		w.s.SourceFrames.Inc()
		w.s.SourceBytes.Add(float64(len(f.Payload)))
		w.s.SourceInFlight.Inc()
	}
	return f, err
}

func (w *source) Release(f *pipeline.Frame) {
	w.s.SourceInFlight.Dec()
	w.Source.Release(f)
}

// Intact makes a counted source a pipeline.OverwritingSource: it asks the
// source it counts, where that source is one, and finds every frame intact
// where it is not (its sender waits for Release).
func (w *source) Intact(f *pipeline.Frame) bool {
	if o, ok := w.Source.(pipeline.OverwritingSource); ok {
		return o.Intact(f)
	}
	return true
}

// Backend returns b, timed, keeping preview images. The result implements
// gpu.HostAllocator, gpu.Reserver and gpu.Compressor where b does; the
// chunks a Compressor makes count as compressed.
func (s *Stages) Backend(b gpu.Backend) gpu.Backend {
	w := &backend{b, s}
	a, host := b.(gpu.HostAllocator)
	r, res := b.(gpu.Reserver)
	c, comp := b.(gpu.Compressor)
	switch {
	case comp && !host && !res:
		return struct {
			*backend
			gpu.Compressor
		}{w, c}
	case host && res:
		return struct {
			*backend
			gpu.HostAllocator
			gpu.Reserver
		}{w, a, r}
	case host:
		return struct {
			*backend
			gpu.HostAllocator
		}{w, a}
	case res:
		return struct {
			*backend
			gpu.Reserver
		}{w, r}
	}
	return w
}

type backend struct {
	gpu.Backend
	s *Stages
}

func (w *backend) Decode(batch []gpu.Job) error {
	start := time.Now()
	w.s.Preview.keepImages(batch, start)
	err := w.Backend.Decode(batch)
	end := time.Now()
	w.s.DecodeSeconds.Observe(end.Sub(start).Seconds())
	if err != nil {
		return err
	}
	var ok, bytes int
	for i := range batch {
		j := &batch[i]
		bytes += len(j.Payload)
		if j.Err == nil {
			ok++
		}
		if j.Compressed {
			w.s.CompressFrames.Inc()
			w.s.CompressIn.Add(float64(j.Header.Format.ImageSize()))
			w.s.CompressOut.Add(float64(len(j.Chunk)))
		}
	}
	w.s.DecodeFrames.Add(float64(ok))
	w.s.DecodeErrors.Add(float64(len(batch) - ok))
	w.s.DecodeBytes.Add(float64(bytes))
	w.s.Preview.offer(batch, end)
	return nil
}

// NewCodec returns a codec maker whose codecs are newCodec's, counted.
// They implement compress.Preshuffled and compress.BlockEncoder where
// newCodec's do; the blocks compressed apart are counted by the backend
// that compresses them, chunk by chunk.
func (s *Stages) NewCodec(newCodec func() (compress.Codec, error)) func() (compress.Codec, error) {
	return func() (compress.Codec, error) {
		c, err := newCodec()
		if err != nil {
			return nil, err
		}
		w := &codec{c, s}
		if be, ok := c.(interface {
			compress.BlockEncoder
			compress.Preshuffled
		}); ok {
			return &blockCodec{&preshuffledCodec{w, be}, be}, nil
		}
		if ps, ok := c.(compress.Preshuffled); ok {
			return &preshuffledCodec{w, ps}, nil
		}
		return w, nil
	}
}

type codec struct {
	compress.Codec
	s *Stages
}

func (w *codec) Encode(dst, src []byte) ([]byte, error) {
	start := time.Now()
	out, err := w.Codec.Encode(dst, src)
	w.count(start, len(src), len(out)-len(dst), err)
	return out, err
}

// count counts one chunk encoded since start, in and out bytes.
func (w *codec) count(start time.Time, in, out int, err error) {
	observe(w.s.CompressSeconds, start)
	if err == nil {
		w.s.CompressFrames.Inc()
		w.s.CompressIn.Add(float64(in))
		w.s.CompressOut.Add(float64(out))
	}
}

// preshuffledCodec is a counted compress.Preshuffled.
type preshuffledCodec struct {
	*codec
	ps compress.Preshuffled
}

func (w *preshuffledCodec) BlockElems() int { return w.ps.BlockElems() }

func (w *preshuffledCodec) EncodeShuffled(dst, shuffled []byte) ([]byte, error) {
	start := time.Now()
	out, err := w.ps.EncodeShuffled(dst, shuffled)
	w.count(start, len(shuffled), len(out)-len(dst), err)
	return out, err
}

// blockCodec is a counted compress.BlockEncoder.
type blockCodec struct {
	*preshuffledCodec
	be compress.BlockEncoder
}

func (w *blockCodec) AppendHeader(dst []byte, n int) []byte { return w.be.AppendHeader(dst, n) }

func (w *blockCodec) AppendBlocks(dst, src []byte) ([]byte, error) {
	return w.be.AppendBlocks(dst, src)
}

// NewProcessor returns a processor maker whose processors are
// newProcessor's, counted and timed like every stage; nil for nil (no
// processor stage).
func (s *Stages) NewProcessor(newProcessor func() (pipeline.Processor, error)) func() (pipeline.Processor, error) {
	if newProcessor == nil {
		return nil
	}
	return func() (pipeline.Processor, error) {
		p, err := newProcessor()
		if err != nil {
			return nil, err
		}
		return &processor{p, s}, nil
	}
}

type processor struct {
	pipeline.Processor
	s *Stages
}

func (w *processor) Process(n int, f frame.Format, image []byte) error {
	start := time.Now()
	err := w.Processor.Process(n, f, image)
	observe(w.s.ProcessSeconds, start)
	w.s.ProcessFrames.Inc()
	if err != nil {
		w.s.ProcessErrors.Inc()
	}
	return err
}

// Sink returns sink, counted.
func (s *Stages) Sink(sink pipeline.Sink) pipeline.Sink { return &sinkWrapper{sink, s} }

type sinkWrapper struct {
	pipeline.Sink
	s *Stages
}

func (w *sinkWrapper) WriteChunk(n int, chunk []byte) error {
	start := time.Now()
	err := w.Sink.WriteChunk(n, chunk)
	observe(w.s.WriteSeconds, start)
	if err == nil {
		w.s.WriteFrames.Inc()
		w.s.WriteBytes.Add(float64(len(chunk)))
	}
	return err
}

func (w *sinkWrapper) SetRecord(n int, r frame.Record) error {
	err := w.Sink.SetRecord(n, r)
	if err == nil && int(r.Status) < len(w.s.Records) {
		w.s.Records[r.Status].Inc()
	}
	return err
}
