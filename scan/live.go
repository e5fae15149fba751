package scan

import (
	"cmp"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/stream"
	"h5ingest/version"
)

// liveSetup is what a scan needs to open its live stream once it knows
// its scan id and module.
type liveSetup struct {
	keys     config.Stream
	series   stream.Series
	maxChunk int
	modules  []config.Module
	err      error // why the stream cannot carry the codec's chunks
}

// newLiveSetup returns the live stream a scan of format writes under the
// profile, or nil where the profile asks for none.
func newLiveSetup(stages *registry.Registry, profile config.Profile, pl plan.Plan, format frame.Format, path string, user map[string]any, maxChunk int) *liveSetup {
	if profile.Stream.Address == "" {
		return nil
	}
	compression, err := streamCompression(stages, profile.Output.Compression)
	d := profile.Detector
	s := stream.Series{
		ScanID:          strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)),
		Armed:           time.Now(),
		Width:           format.Width(),
		Height:          format.Height(),
		ElemSize:        format.PixelSize(),
		Compression:     compression,
		Images:          pl.Frames(),
		PixelSize:       d.PixelSize,
		Energy:          d.Energy,
		Description:     d.Model,
		CountTime:       d.CountTime,
		FrameTime:       d.FrameTime,
		Distance:        d.Distance,
		SensorMaterial:  d.SensorMaterial,
		SensorThickness: d.SensorThickness,
		Threshold:       d.Threshold,
		SerialNumber:    d.SerialNumber,
		UserData: map[string]any{
			"h5ingest": version.String(), "profile": profile.Name, "output": path,
		},
	}
	if len(d.BeamCenter) == 2 {
		s.BeamCenter = d.BeamCenter
	}
	md := profile.Metadata
	for k, v := range map[string]string{"title": cmp.Or(md.Title, profile.Description), "sample": md.Sample, "experiment_identifier": md.ExperimentID} {
		if v != "" {
			s.UserData[k] = v
		}
	}
	if len(user) > 0 {
		s.UserData["user_metadata"] = user
	}
	if len(profile.Output.Processors) > 0 {
		names := make([]string, len(profile.Output.Processors))
		for i, p := range profile.Output.Processors {
			names[i] = p.Name
		}
		s.UserData["processors"] = names
	}
	if bits := d.BitDepth; bits > 0 && bits < 64 {
		s.Saturation = 1<<bits - 1
	}
	if pl.Frames() > 0 {
		s.UserData["plan"] = pl.String()
		for _, k := range pl.ImageKeys() {
			s.ImageKeys = append(s.ImageKeys, uint8(k))
		}
		s.Angles = pl.Angles()
		if n := pl.Count(plan.Projection); n > 0 && pl.AngleEnd != pl.AngleStart {
			s.Rotation = &stream.Axis{Start: pl.AngleStart, Increment: (pl.AngleEnd - pl.AngleStart) / float64(n)}
		}
	}
	return &liveSetup{keys: profile.Stream, series: s, maxChunk: maxChunk, modules: d.Modules, err: err}
}

// streamCompression returns the Stream V2 compression of the chunks of
// the codec named codec, as its entry in stages says: "bslz4" or "lz4",
// or "" for the pixels as they are.
func streamCompression(stages *registry.Registry, codec string) (string, error) {
	if stages == nil {
		return "", errNoRegistry
	}
	c, ok := stages.Codec(codec)
	switch {
	case !ok || c.Stream == registry.StreamNone:
		return "", fmt.Errorf("compression %s has no Stream V2 encoding", codec)
	case c.Stream == registry.StreamRaw:
		return "", nil
	}
	return c.Stream, nil
}

// open binds the stream of module: the profile's port, plus the module's
// index in a detector of several.
func (l *liveSetup) open(scanID string, module int) (*stream.Stream, error) {
	if l.err != nil {
		return nil, l.err
	}
	addr := l.keys.Address
	if len(l.modules) > 1 {
		host, port, _ := net.SplitHostPort(strings.TrimPrefix(addr, "tcp://")) // validated with the profile
		p, _ := strconv.Atoi(port)
		for i, m := range l.modules {
			if m.ID == module {
				addr = "tcp://" + net.JoinHostPort(host, strconv.Itoa(p+i))
			}
		}
	}
	s := l.series
	if scanID != "" {
		s.ScanID = scanID
	}
	return stream.Open(stream.Config{
		Address: addr, Queue: l.keys.Queue, MaxBytes: int64(l.keys.MaxBytes), Every: l.keys.Every, MaxRate: l.keys.MaxRate, Linger: l.keys.Linger,
	}, s, l.maxChunk)
}

// openLive opens the scan's live stream, where its profile asks for one.
// Call it before run.
func (r *Module) openLive(scanID string, module int) error {
	if r.liveSetup == nil {
		return nil
	}
	live, err := r.liveSetup.open(scanID, module)
	if err != nil {
		return fmt.Errorf("key stream.address: %w", err)
	}
	r.live = live
	r.log.Info("live stream", zap.String("endpoint", live.Endpoint()), zap.String("series_unique_id", live.UniqueID()))
	if err := r.procs.openStreams(r.liveSetup, live, scanID, module, r.log); err != nil {
		live.Close()
		r.live = nil
		return fmt.Errorf("key stream.address: %w", err)
	}
	if w := r.watch; w.obs != nil {
		reg := moduleMetrics{w}
		for _, o := range []struct {
			name string
			f    func(stream.Stats) uint64
		}{
			{"sent", func(s stream.Stats) uint64 { return s.Sent }},
			{"no_consumer", func(s stream.Stats) uint64 { return s.NoConsumer }},
			{"slow_consumer", func(s stream.Stats) uint64 { return s.Slow }},
			{"out_of_order", func(s stream.Stats) uint64 { return s.OutOfOrder }},
			{"not_delivered", func(s stream.Stats) uint64 { return s.Undelivered }},
			{"thinned", func(s stream.Stats) uint64 { return s.Thinned }},
		} {
			reg.counter("h5ingest_stream_images_total", "Images offered to the live stream, by outcome: sent (ZeroMQ took and kept them), or left out of the stream (the file has them) because no consumer was connected (no_consumer), the consumer was slower than the scan (slow_consumer), the image came after the stream had passed its turn (out_of_order), or the linger after the scan ran out (not_delivered); or thinned (every, max_rate).",
				func() float64 { return float64(o.f(live.Stats())) }, "outcome", o.name)
		}
		reg.gauge("h5ingest_stream_end_delivered", "1 once the live stream's end of series has left for a consumer; 0 while the scan runs or where it was not delivered.",
			func() float64 {
				if live.Stats().EndDelivered {
					return 1
				}
				return 0
			})
	}
	return nil
}

// closeLive ends the live stream, if the scan has one, and returns what
// went to it (nil without one) and why it did not end cleanly: a warning
// only, the file holds every frame regardless.
func (r *Module) closeLive() (*LiveResult, error) {
	if r.live == nil {
		return nil, nil
	}
	st, err := r.live.Close()
	r.live = nil
	fields := []zap.Field{zap.Uint64("sent", st.Sent), zap.Uint64("dropped", st.Dropped), zap.Uint64("no_consumer", st.NoConsumer),
		zap.Uint64("slow_consumer", st.Slow), zap.Uint64("out_of_order", st.OutOfOrder), zap.Uint64("not_delivered", st.Undelivered),
		zap.Uint64("thinned", st.Thinned), zap.Uint64("image_ids_skipped", st.Gaps), zap.Bool("end_delivered", st.EndDelivered)}
	if err != nil {
		r.log.Warn("live stream ended", append(fields, zap.Error(err))...)
	} else {
		r.log.Info("live stream ended", fields...)
	}
	return &LiveResult{Stats: st, Ended: err == nil}, err
}
