package scan

import (
	"errors"
	"fmt"
	"path"
	"sync"

	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/writer"
)

// processing is a scan's processor stages (output.processors): started
// when the scan opens, each told of the scan's format and plan, and
// closed when the scan ends. Where a stage writes a dataset of its own
// into the scan's file, its writes and the pipeline's are serialised by
// one lock.
type processing struct {
	stages []namedStage
	extras []writer.Extra // datasets the stages declared, for the file
	// streams are the series the stages declared, opened with the scan's
	// live stream (openStreams); log is the scan's, once they are. series
	// and seriesErrs are what they sent and why one did not end cleanly,
	// once closed.
	streams    []*previewStream
	log        *zap.Logger
	series     []SeriesResult
	seriesErrs []error

	mu       sync.Mutex     // serialises calls to file once it is bound
	file     *writer.Writer // nil before bind and after close
	starting bool           // AddDataset is allowed
	closed   bool
}

// namedStage is a started stage and the processor's name.
type namedStage struct {
	name  string
	stage pipeline.Stage
}

// startProcessors starts the stages of the processors profile p names,
// in order, for a scan of plan pl and frames of format f. An entry that
// names no registered processor, sets an option it does not know, or a
// stage that cannot start, is a usage error naming the key.
func startProcessors(reg *registry.Registry, p config.Profile, pl plan.Plan, f frame.Format) (*processing, error) {
	pr := &processing{}
	if len(p.Output.Processors) == 0 {
		return pr, nil
	}
	if reg == nil {
		return nil, errNoRegistry
	}
	var keys []int8
	if pl.Frames() > 0 {
		keys = pl.ImageKeys()
	}
	pr.starting = true
	defer func() { pr.starting = false }()
	var addStream func(pipeline.StreamSeries) (pipeline.FrameStream, error)
	if p.Stream.Address != "" {
		addStream = pr.addStream
	}
	for i, entry := range p.Output.Processors {
		st, err := reg.StartProcessor(i, entry, pipeline.Scan{
			Format: f, Frames: pl.Frames(), ImageKeys: keys, AddDataset: pr.addDataset, AddStream: addStream,
		})
		if err == nil && st == nil {
			err = fmt.Errorf("processor %s: its Start returned no stage", entry.Name)
		}
		if err != nil {
			pr.close()
			return nil, Usage(err)
		}
		pr.stages = append(pr.stages, namedStage{entry.Name, st})
	}
	return pr, nil
}

// addDataset is pipeline.Scan.AddDataset.
func (pr *processing) addDataset(d pipeline.Dataset) (pipeline.FrameWriter, error) {
	p := path.Clean("/" + d.Path)
	switch {
	case !pr.starting:
		return nil, fmt.Errorf("dataset %s: a stage declares its datasets while it starts, before the file is made", p)
	case d.Height <= 0 || d.Width <= 0:
		return nil, fmt.Errorf("dataset %s: frame size %dx%d is not positive", p, d.Height, d.Width)
	}
	for _, e := range pr.extras {
		if path.Clean("/"+e.Path) == p {
			return nil, fmt.Errorf("dataset %s: another processor writes it", p)
		}
	}
	pr.extras = append(pr.extras, writer.Extra{Path: p, Height: d.Height, Width: d.Width})
	return &extraWriter{pr, len(pr.extras) - 1}, nil
}

// bind gives the stages' datasets the scan's file, once it is made.
func (pr *processing) bind(file *writer.Writer) {
	pr.mu.Lock()
	pr.file = file
	pr.mu.Unlock()
}

// newProcessor returns what makes each compression worker's processor:
// the processors of every stage, in order; nil where there are none.
func (pr *processing) newProcessor() func() (pipeline.Processor, error) {
	if len(pr.stages) == 0 {
		return nil
	}
	return func() (pipeline.Processor, error) {
		var ch chain
		for _, s := range pr.stages {
			p, err := s.stage.Processor()
			if err != nil {
				return nil, fmt.Errorf("processor %s: %w", s.name, err)
			}
			if p == nil {
				return nil, fmt.Errorf("processor %s: its stage gave no processor", s.name)
			}
			ch = append(ch, p)
		}
		if len(ch) == 1 {
			return ch[0], nil
		}
		return ch, nil
	}
}

// sink returns the scan's sink, serialised with the stages' dataset
// writes where there are any.
func (pr *processing) sink(s pipeline.Sink) pipeline.Sink {
	if pr == nil || len(pr.extras) == 0 {
		return s
	}
	return &lockedSink{s, &pr.mu}
}

// close closes every stage, once every frame is processed, then the
// series they sent on the live stream, and unbinds the file; it returns
// the stages' errors, each named by its processor. A second call does
// nothing.
func (pr *processing) close() error {
	if pr == nil || pr.closed {
		return nil
	}
	pr.closed = true
	var errs []error
	for _, s := range pr.stages {
		if err := s.stage.Close(); err != nil {
			errs = append(errs, fmt.Errorf("processor %s: %w", s.name, err))
		}
	}
	pr.closeStreams()
	pr.bind(nil)
	return errors.Join(errs...)
}

// extraWriter writes one declared dataset of the scan's file.
type extraWriter struct {
	pr *processing
	i  int
}

// WriteFrame implements pipeline.FrameWriter.
func (w *extraWriter) WriteFrame(n int, data []byte) error {
	w.pr.mu.Lock()
	defer w.pr.mu.Unlock()
	if w.pr.file == nil {
		return fmt.Errorf("write frame %d of %s: the scan's file is not open", n, w.pr.extras[w.i].Path)
	}
	return w.pr.file.WriteExtra(w.i, n, data)
}

// lockedSink is a sink whose calls hold a lock.
type lockedSink struct {
	pipeline.Sink
	mu *sync.Mutex
}

func (s *lockedSink) WriteChunk(n int, chunk []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Sink.WriteChunk(n, chunk)
}

func (s *lockedSink) SetRecord(n int, r frame.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Sink.SetRecord(n, r)
}
