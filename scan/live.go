package scan

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
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
}

// newLiveSetup returns the live stream a scan of format writes under the
// profile, or nil where the profile asks for none.
func newLiveSetup(profile config.Profile, pl plan.Plan, format frame.Format, path string, user map[string]any, maxChunk int) *liveSetup {
	if profile.Stream.Address == "" {
		return nil
	}
	s := stream.Series{
		UniqueID:    strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)),
		Armed:       time.Now(),
		Width:       format.Width(),
		Height:      format.Height(),
		ElemSize:    format.PixelSize(),
		Compression: profile.Output.Compression,
		Images:      pl.Frames(),
		PixelSize:   profile.Detector.PixelSize,
		Energy:      profile.Detector.Energy,
		Description: profile.Detector.Model,
		UserData: map[string]any{
			"h5ingest": version.String(), "profile": profile.Name, "output": path,
		},
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
	if d := profile.Detector.BitDepth; d > 0 && d < 64 {
		s.Saturation = 1<<d - 1
	}
	if pl.Frames() > 0 {
		s.UserData["plan"] = pl.String()
		for _, k := range pl.ImageKeys() {
			s.ImageKeys = append(s.ImageKeys, uint8(k))
		}
		s.Angles = pl.Angles()
	}
	return &liveSetup{keys: profile.Stream, series: s, maxChunk: maxChunk, modules: profile.Detector.Modules}
}

// open binds the stream of module: the profile's port, plus the module's
// index in a detector of several.
func (l *liveSetup) open(scanID string, module int) (*stream.Stream, error) {
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
		s.UniqueID = scanID
		if n, err := strconv.ParseUint(scanID, 10, 64); err == nil {
			s.Number = n
		}
	}
	return stream.Open(stream.Config{Address: addr, Queue: l.keys.Queue, Every: l.keys.Every, MaxRate: l.keys.MaxRate}, s, l.maxChunk)
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
	r.log.Info("live stream", zap.String("endpoint", live.Endpoint()))
	if w := r.watch; w.obs != nil {
		reg := moduleMetrics{w}
		for _, o := range []struct {
			name string
			f    func(stream.Stats) uint64
		}{
			{"sent", func(s stream.Stats) uint64 { return s.Sent }},
			{"dropped", func(s stream.Stats) uint64 { return s.Dropped }},
			{"thinned", func(s stream.Stats) uint64 { return s.Thinned }},
		} {
			reg.counter("h5ingest_stream_images_total", "Images offered to the live stream, by outcome: sent, dropped (the queue was full; the file has them) or thinned (every, max_rate).",
				func() float64 { return float64(o.f(live.Stats())) }, "outcome", o.name)
		}
	}
	return nil
}

// closeLive ends the live stream, if the scan has one, and prints its
// counts under the summary. A stream that cannot end cleanly is a
// warning: the file holds every frame regardless.
func (r *Module) closeLive(w io.Writer) {
	if r.live == nil {
		return
	}
	st, err := r.live.Close()
	r.live = nil
	fmt.Fprintf(w, "  stream          %d images sent, %d dropped (the queue was full: in the file, not the stream), %d thinned\n",
		st.Sent, st.Dropped, st.Thinned)
	if err != nil {
		fmt.Fprintf(r.errs, "h5ingest: warning: %v\n", err)
	}
}
