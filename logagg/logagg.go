// Package logagg turns per-frame log events into one line per interval with
// counts, so that a stream of bad frames cannot flood a log.
//
// An event is per-frame when it carries a field named "frame". Such events
// with the same level, message and "reason" field are gathered for an
// interval (a second by default) and then logged as one entry with the same
// message and the fields count, first and last (frame numbers), followed by
// the other fields of the first event of the interval. Every other entry
// passes straight through.
package logagg

import (
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultInterval is how long events are gathered before their line is
// logged.
const DefaultInterval = time.Second

// Wrap returns a logger that logs through log's core, with per-frame events
// aggregated over interval (0 means DefaultInterval). Sync logs what is
// gathered so far. A logger that is already aggregated is returned as is.
func Wrap(log *zap.Logger, interval time.Duration) *zap.Logger {
	if _, ok := log.Core().(*core); ok {
		return log
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return newCore(c, interval)
	}))
}

// core is the aggregating zapcore.Core.
type core struct {
	zapcore.Core // the destination; its Enabled and Sync are used as they are
	*window
}

// window gathers the events of one interval.
type window struct {
	inner    zapcore.Core
	interval time.Duration

	mu     sync.Mutex
	groups []*group // in order of first appearance
	timer  *time.Timer
}

// group is the events of one key in the current window.
type group struct {
	entry       zapcore.Entry // of the first event
	reason      string
	fields      []zapcore.Field // the first event's, without its frame
	count       int
	first, last uint64 // frame numbers, as the frames carry them
}

func newCore(inner zapcore.Core, interval time.Duration) *core {
	return &core{Core: inner, window: &window{inner: inner, interval: interval}}
}

// With returns a core adding fields to every entry; its events are gathered
// apart from the parent's.
func (c *core) With(fields []zapcore.Field) zapcore.Core {
	return newCore(c.inner.With(fields), c.interval)
}

// Check adds the core to ce when the level is enabled; whether the entry is
// a per-frame event is only known from its fields, in Write.
func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write gathers a per-frame event, and hands any other entry to the
// destination through its own Check (so that its sampling applies).
func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	n, ok := frameNumber(fields)
	if !ok {
		if ce := c.inner.Check(e, nil); ce != nil {
			ce.Write(fields...)
		}
		return nil
	}
	c.add(e, fields, n)
	return nil
}

// Sync logs the events gathered so far, then syncs the destination.
func (c *core) Sync() error {
	c.flush()
	return c.inner.Sync()
}

func (w *window) add(e zapcore.Entry, fields []zapcore.Field, n uint64) {
	reason := fieldString(fields, "reason")
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.groups {
		if g.entry.Level == e.Level && g.entry.Message == e.Message && g.reason == reason {
			g.count++
			g.first, g.last = min(g.first, n), max(g.last, n)
			return
		}
	}
	g := &group{entry: e, reason: reason, count: 1, first: n, last: n}
	for _, f := range fields {
		if f.Key != "frame" {
			g.fields = append(g.fields, f)
		}
	}
	w.groups = append(w.groups, g)
	if w.timer == nil {
		w.timer = time.AfterFunc(w.interval, w.flush)
	}
}

// flush logs one entry per group and starts a new window.
func (w *window) flush() {
	w.mu.Lock()
	groups := w.groups
	w.groups = nil
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.mu.Unlock()
	for _, g := range groups {
		e := g.entry
		e.Time = time.Now()
		ce := w.inner.Check(e, nil)
		if ce == nil {
			continue
		}
		fields := append([]zapcore.Field{zap.Int("count", g.count), zap.Uint64("first", g.first), zap.Uint64("last", g.last)}, g.fields...)
		ce.Write(fields...)
	}
}

// frameNumber returns the value of an integer field named "frame": frame
// numbers are unsigned 64-bit, so a uint64 keeps its every value (2^63
// and above too); a negative signed value is no frame number.
func frameNumber(fields []zapcore.Field) (uint64, bool) {
	for _, f := range fields {
		if f.Key != "frame" {
			continue
		}
		switch f.Type {
		case zapcore.Int64Type, zapcore.Int32Type, zapcore.Int16Type, zapcore.Int8Type:
			return uint64(f.Integer), f.Integer >= 0
		case zapcore.Uint64Type, zapcore.UintptrType, zapcore.Uint32Type, zapcore.Uint16Type, zapcore.Uint8Type:
			return uint64(f.Integer), true
		}
	}
	return 0, false
}

// fieldString returns the text of a string or Stringer field, or "".
func fieldString(fields []zapcore.Field, key string) string {
	for _, f := range fields {
		if f.Key != key {
			continue
		}
		switch f.Type {
		case zapcore.StringType:
			return f.String
		case zapcore.StringerType:
			if s, ok := f.Interface.(fmt.Stringer); ok {
				return s.String()
			}
		}
	}
	return ""
}
