package scan

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"h5ingest/pipeline"
	"h5ingest/stream"
)

// previewStream is a series of images a processor stage declared
// (pipeline.Scan.AddStream): a Stream V2 series of its own, on a socket
// of its own, opened with the scan's live stream and closed once every
// stage is closed. Its images are no chunk of the file: the scan's
// series, and its consumers, are as they would be without it.
type previewStream struct {
	series pipeline.StreamSeries
	live   atomic.Pointer[stream.Stream] // set before the first frame
}

// WriteFrame implements pipeline.FrameStream.
func (p *previewStream) WriteFrame(n int, data []byte) error {
	st := p.live.Load()
	if st == nil {
		return fmt.Errorf("stream %s: image %d: the scan's live stream is not open", p.series.Name, n)
	}
	return st.WriteFrame(n, data)
}

// Skip implements pipeline.FrameStream.
func (p *previewStream) Skip(n int) {
	if st := p.live.Load(); st != nil {
		st.Skip(n)
	}
}

// addStream is pipeline.Scan.AddStream.
func (pr *processing) addStream(s pipeline.StreamSeries) (pipeline.FrameStream, error) {
	switch {
	case !pr.starting:
		return nil, fmt.Errorf("stream %s: a stage declares its streams while it starts", s.Name)
	case s.Name == "" || strings.ContainsAny(s.Name, "/ "):
		return nil, fmt.Errorf("stream %q: a series is named by one word", s.Name)
	case s.Height <= 0 || s.Width <= 0:
		return nil, fmt.Errorf("stream %s: image size %dx%d is not positive", s.Name, s.Height, s.Width)
	}
	for _, p := range pr.streams {
		if p.series.Name == s.Name {
			return nil, fmt.Errorf("stream %s: another processor sends it", s.Name)
		}
	}
	p := &previewStream{series: s}
	pr.streams = append(pr.streams, p)
	return p, nil
}

// openStreams opens the series the stages declared, once the scan's live
// stream raw is open for module: each binds its own address, or, by
// default, the port after the scan's streams: with stream.address's port
// P and M modules, the k-th series (from 0) of module index i binds
// P + M(k+1) + i.
func (pr *processing) openStreams(l *liveSetup, raw *stream.Stream, scanID string, module int, log *zap.Logger) error {
	if pr == nil || len(pr.streams) == 0 {
		return nil
	}
	pr.log = log
	index := 0
	for i, m := range l.modules {
		if m.ID == module {
			index = i
		}
	}
	for k, p := range pr.streams {
		addr := previewAddress(l.keys.Address, p.series.Address, len(l.modules), index, k)
		s := l.series
		s.ScanID = cmp.Or(scanID, s.ScanID) + "-" + p.series.Name
		s.Width, s.Height, s.ElemSize, s.Float, s.Compression = p.series.Width, p.series.Height, 4, true, ""
		s.Flatfield, s.Images, s.Saturation = p.series.FlatField, p.series.Images, 0
		if p.series.Scale > 1 { // the frame's pixel size and beam centre are not the image's
			s.PixelSize, s.BeamCenter = 0, nil
		}
		s.UserData = maps.Clone(s.UserData)
		s.UserData["series"] = p.series.Name
		s.UserData["images_of"] = raw.UniqueID()
		st, err := stream.Open(stream.Config{
			Address: addr, Queue: l.keys.Queue, MaxBytes: int64(l.keys.MaxBytes), Linger: l.keys.Linger,
		}, s, 4*p.series.Width*p.series.Height)
		if err != nil {
			pr.closeStreams()
			return fmt.Errorf("series %s: %w", p.series.Name, err)
		}
		p.live.Store(st)
		log.Info("live stream", zap.String("series", p.series.Name), zap.String("endpoint", st.Endpoint()), zap.String("series_unique_id", st.UniqueID()))
	}
	return nil
}

// previewAddress returns the address of the k-th series (from 0) a stage
// declared, of the module at index of modules, given the scan's stream
// address live and the series' own address (own, "" for none): own, plus
// index in a scan of several modules; else live's port P plus
// modules(k+1) + index, the ports after the scan's streams.
func previewAddress(live, own string, modules, index, k int) string {
	if own != "" {
		if modules > 1 {
			return offsetPort(own, index)
		}
		return own
	}
	return offsetPort(live, max(modules, 1)*(k+1)+index)
}

// offsetPort returns the tcp:// address addr with its port moved by n; a
// port ZeroMQ chooses (*) stays so.
func offsetPort(addr string, n int) string {
	host, port, err := net.SplitHostPort(strings.TrimPrefix(addr, "tcp://"))
	if err != nil || port == "*" {
		return addr
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return addr
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(p+n))
}

// closeStreams ends the stages' series, once no stage writes to them,
// logs what each sent and keeps it for the scan's summary (series). A
// series that could not end cleanly is a warning (seriesErrs), as the
// scan's own stream is: the stage's results are not the scan's frames.
func (pr *processing) closeStreams() {
	for _, p := range pr.streams {
		st := p.live.Load()
		if st == nil {
			continue
		}
		stats, err := st.Close()
		pr.series = append(pr.series, SeriesResult{Name: p.series.Name, LiveResult: LiveResult{Stats: stats, Ended: err == nil}})
		fields := []zap.Field{zap.String("series", p.series.Name), zap.Uint64("sent", stats.Sent), zap.Uint64("dropped", stats.Dropped),
			zap.Uint64("no_consumer", stats.NoConsumer), zap.Uint64("slow_consumer", stats.Slow), zap.Uint64("not_delivered", stats.Undelivered),
			zap.Bool("end_delivered", stats.EndDelivered)}
		log := pr.log
		if log == nil {
			log = zap.NewNop()
		}
		if err != nil {
			pr.seriesErrs = append(pr.seriesErrs, fmt.Errorf("series %s: %w", p.series.Name, err))
			log.Warn("live stream ended", append(fields, zap.Error(err))...)
		} else {
			log.Info("live stream ended", fields...)
		}
	}
}
