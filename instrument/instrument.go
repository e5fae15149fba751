// Package instrument wraps the stages of an ingest pipeline (its Source,
// decode Backend, chunk Codec and Sink) in types that implement the same
// interfaces and count and time what passes through them, into a metrics
// registry. The stage code itself knows nothing of metrics.
//
// The wrappers allocate nothing per frame: counters and fixed-bucket
// histograms are updated with atomic operations, a few tens of nanoseconds
// per frame, so a command may wrap every pipeline and register the metrics
// only when someone watches. The Backend wrapper also keeps a copy of a
// recently decoded image, once its Preview is enabled, at most one every
// PreviewInterval; it never waits for a reader of it.
package instrument

import (
	"context"
	"strconv"
	"time"

	"h5ingest/compress"
	"h5ingest/gpu"
	"h5ingest/ingest"
	"h5ingest/ingest/frame"
	"h5ingest/metrics"
)

// Stages holds the metrics of one pipeline and makes the wrappers that
// update them. Every field is set by New; Register shows them in a
// registry.
type Stages struct {
	SourceFrames   *metrics.Counter   // frames the source handed out
	SourceBytes    *metrics.Counter   // their payload bytes
	SourceWait     *metrics.Histogram // seconds per Next call
	SourceInFlight *metrics.Gauge     // frames handed out, not yet released

	DecodeFrames  *metrics.Counter   // frames decoded
	DecodeErrors  *metrics.Counter   // frames the backend could not decode
	DecodeBytes   *metrics.Counter   // payload bytes given to the backend
	DecodeSeconds *metrics.Histogram // seconds per Decode call (one batch)

	CompressFrames  *metrics.Counter   // chunks encoded
	CompressIn      *metrics.Counter   // image bytes encoded
	CompressOut     *metrics.Counter   // chunk bytes out
	CompressSeconds *metrics.Histogram // seconds per Encode call

	WriteFrames  *metrics.Counter    // chunks written
	WriteBytes   *metrics.Counter    // chunk bytes written
	WriteSeconds *metrics.Histogram  // seconds per WriteChunk call
	Records      [4]*metrics.Counter // records stored, by frame status 0..3

	// Preview keeps a recent decoded image.
	Preview *Preview
}

// statusNames are the record status label values, by frame status.
var statusNames = [4]string{
	frame.StatusOK:          "ok",
	frame.StatusMissing:     "missing",
	frame.StatusCRCMismatch: "crc_mismatch",
	frame.StatusRejected:    "rejected",
}

// New returns the stage metrics of one pipeline, not registered yet, and
// a preview that keeps nothing until enabled.
func New() *Stages {
	lat := metrics.LatencyBuckets
	s := &Stages{
		SourceFrames: new(metrics.Counter), SourceBytes: new(metrics.Counter),
		SourceWait: metrics.NewHistogram(lat), SourceInFlight: new(metrics.Gauge),
		DecodeFrames: new(metrics.Counter), DecodeErrors: new(metrics.Counter),
		DecodeBytes: new(metrics.Counter), DecodeSeconds: metrics.NewHistogram(lat),
		CompressFrames: new(metrics.Counter), CompressIn: new(metrics.Counter),
		CompressOut: new(metrics.Counter), CompressSeconds: metrics.NewHistogram(lat),
		WriteFrames: new(metrics.Counter), WriteBytes: new(metrics.Counter),
		WriteSeconds: metrics.NewHistogram(lat),
		Preview:      NewPreview(0),
	}
	for i := range s.Records {
		s.Records[i] = new(metrics.Counter)
	}
	return s
}

// Register adds the metrics to reg, each with the label module.
func (s *Stages) Register(reg *metrics.Registry, module int) {
	m := metrics.Label{Name: "module", Value: strconv.Itoa(module)}
	for _, r := range []struct {
		name, help string
		m          metrics.Metric
	}{
		{"h5ingest_source_frames_total", "Frames the source handed to the pipeline.", s.SourceFrames},
		{"h5ingest_source_bytes_total", "Payload bytes of the frames the source handed to the pipeline.", s.SourceBytes},
		{"h5ingest_source_next_seconds", "Time the pipeline waited for each frame from the source.", s.SourceWait},
		{"h5ingest_source_frames_in_flight", "Frames the source handed out and the pipeline has not released: ring slots in use for a fabric stream.", s.SourceInFlight},
		{"h5ingest_decode_frames_total", "Frames decoded.", s.DecodeFrames},
		{"h5ingest_decode_errors_total", "Frames the backend could not decode (recorded as rejected).", s.DecodeErrors},
		{"h5ingest_decode_bytes_total", "Payload bytes given to the decode backend.", s.DecodeBytes},
		{"h5ingest_decode_batch_seconds", "Time to decode and checksum one batch of frames.", s.DecodeSeconds},
		{"h5ingest_compress_frames_total", "Chunks compressed.", s.CompressFrames},
		{"h5ingest_compress_bytes_in_total", "Image bytes compressed.", s.CompressIn},
		{"h5ingest_compress_bytes_out_total", "Compressed chunk bytes.", s.CompressOut},
		{"h5ingest_compress_frame_seconds", "Time to compress one frame.", s.CompressSeconds},
		{"h5ingest_write_frames_total", "Chunks written to the file.", s.WriteFrames},
		{"h5ingest_write_bytes_total", "Chunk bytes written to the file.", s.WriteBytes},
		{"h5ingest_write_frame_seconds", "Time to write one chunk to the file.", s.WriteSeconds},
	} {
		reg.Register(r.name, r.help, r.m, m)
	}
	for st, name := range statusNames {
		reg.Register("h5ingest_records_total", "Frame records stored in the file, by status.", s.Records[st], m, metrics.Label{Name: "status", Value: name})
	}
	reg.GaugeFunc("h5ingest_compress_ratio", "Image bytes over compressed bytes so far.", func() float64 {
		if out := s.CompressOut.Value(); out > 0 {
			return float64(s.CompressIn.Value()) / float64(out)
		}
		return 0
	}, m)
}

// Source returns src, counted. The result implements
// ingest.HostMemorySource and ingest.HostBufferSource where src does.
func (s *Stages) Source(src ingest.Source) ingest.Source {
	w := &source{src, s}
	m, mem := src.(ingest.HostMemorySource)
	b, bufs := src.(ingest.HostBufferSource)
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

// hostMemory is the method of ingest.HostMemorySource, to embed beside a
// counted source.
type hostMemory interface{ HostMemory() [][]byte }

// hostBuffers is the method of ingest.HostBufferSource, likewise.
type hostBuffers interface {
	ReadIntoHost(gpu.HostAllocator) func()
}

type source struct {
	ingest.Source
	s *Stages
}

func (w *source) Next(ctx context.Context) (*ingest.Frame, error) {
	start := time.Now()
	f, err := w.Source.Next(ctx)
	w.s.SourceWait.ObserveDuration(time.Since(start))
	if err == nil {
		w.s.SourceFrames.Inc()
		w.s.SourceBytes.Add(uint64(len(f.Payload)))
		w.s.SourceInFlight.Add(1)
	}
	return f, err
}

func (w *source) Release(f *ingest.Frame) {
	w.s.SourceInFlight.Add(-1)
	w.Source.Release(f)
}

// Backend returns b, timed, keeping preview images. The result implements
// gpu.HostAllocator and gpu.Reserver where b does.
func (s *Stages) Backend(b gpu.Backend) gpu.Backend {
	w := &backend{b, s}
	a, host := b.(gpu.HostAllocator)
	r, res := b.(gpu.Reserver)
	switch {
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
	err := w.Backend.Decode(batch)
	end := time.Now()
	w.s.DecodeSeconds.ObserveDuration(end.Sub(start))
	if err != nil {
		return err
	}
	var ok, bytes uint64
	for i := range batch {
		bytes += uint64(len(batch[i].Payload))
		if batch[i].Err == nil {
			ok++
		}
	}
	w.s.DecodeFrames.Add(ok)
	w.s.DecodeErrors.Add(uint64(len(batch)) - ok)
	w.s.DecodeBytes.Add(bytes)
	w.s.Preview.offer(batch, end)
	return nil
}

// NewCodec returns a codec maker whose codecs are newCodec's, counted.
// They implement compress.Preshuffled where newCodec's do.
func (s *Stages) NewCodec(newCodec func() (compress.Codec, error)) func() (compress.Codec, error) {
	return func() (compress.Codec, error) {
		c, err := newCodec()
		if err != nil {
			return nil, err
		}
		w := &codec{c, s}
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
	w.s.CompressSeconds.ObserveDuration(time.Since(start))
	if err == nil {
		w.s.CompressFrames.Inc()
		w.s.CompressIn.Add(uint64(in))
		w.s.CompressOut.Add(uint64(out))
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

// Sink returns sink, counted.
func (s *Stages) Sink(sink ingest.Sink) ingest.Sink { return &sinkWrapper{sink, s} }

type sinkWrapper struct {
	ingest.Sink
	s *Stages
}

func (w *sinkWrapper) WriteChunk(n int, chunk []byte) error {
	start := time.Now()
	err := w.Sink.WriteChunk(n, chunk)
	w.s.WriteSeconds.ObserveDuration(time.Since(start))
	if err == nil {
		w.s.WriteFrames.Inc()
		w.s.WriteBytes.Add(uint64(len(chunk)))
	}
	return err
}

func (w *sinkWrapper) SetRecord(n int, r ingest.Record) error {
	err := w.Sink.SetRecord(n, r)
	if err == nil && int(r.Status) < len(w.s.Records) {
		w.s.Records[r.Status].Inc()
	}
	return err
}
