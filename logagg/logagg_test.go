package logagg

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

type reason string

func (r reason) String() string { return string(r) }

func TestAggregates(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	log := Wrap(zap.New(obs), time.Hour).With(zap.String("scan", "s1"))
	for n := 40; n < 100; n++ {
		log.Warn("frame rejected", zap.Uint64("frame", uint64(n)), zap.Error(errors.New("bad payload")))
	}
	log.Warn("frame dropped", zap.Int("frame", 7), zap.Stringer("reason", reason("duplicate")))
	log.Warn("frame dropped", zap.Int("frame", 3), zap.Stringer("reason", reason("duplicate")))
	log.Warn("frame dropped", zap.Int("frame", 5000), zap.Stringer("reason", reason("out of range")))
	log.Warn("frame rejected", zap.Uint64("frame", 1<<63+5), zap.Stringer("reason", reason("beyond the scan")))
	log.Warn("frame rejected", zap.Uint64("frame", 1<<64-1), zap.Stringer("reason", reason("beyond the scan")))
	log.Debug("frame rejected", zap.Int("frame", 1)) // below the level
	log.Info("scan started", zap.String("output", "x.h5"))
	if got := logs.Len(); got != 1 {
		t.Fatalf("%d entries before Sync, want only the one without a frame", got)
	}
	log.Sync()
	all := logs.AllUntimed()
	if len(all) != 5 {
		t.Fatalf("%d entries after Sync, want 5: %v", len(all), all)
	}
	for i, want := range []struct {
		msg         string
		count       int64
		first, last uint64 // frame numbers of 2^63 and above as they are
		reason      string
	}{
		{"frame rejected", 60, 40, 99, ""},
		{"frame dropped", 2, 3, 7, "duplicate"},
		{"frame dropped", 1, 5000, 5000, "out of range"},
		{"frame rejected", 2, 1<<63 + 5, 1<<64 - 1, "beyond the scan"},
	} {
		e := all[i+1]
		m := e.ContextMap()
		if e.Message != want.msg || m["count"] != want.count || m["first"] != want.first || m["last"] != want.last || m["scan"] != "s1" {
			t.Errorf("entry %d: %q %v, want %+v", i+1, e.Message, m, want)
		}
		if _, ok := m["frame"]; ok {
			t.Errorf("entry %d keeps a frame field", i+1)
		}
		if want.reason != "" && m["reason"] != want.reason {
			t.Errorf("entry %d: reason %v, want %s", i+1, m["reason"], want.reason)
		}
	}
	if m := all[1].ContextMap(); m["error"] != "bad payload" {
		t.Errorf("the first event's error is not kept: %v", m)
	}
	log.Sync()
	if logs.Len() != 5 {
		t.Error("a second Sync logged again")
	}
}

func TestFlushesEachInterval(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	log := Wrap(zap.New(obs), 20*time.Millisecond)
	log.Warn("payload CRC mismatch", zap.Int("frame", 1))
	log.Warn("payload CRC mismatch", zap.Int("frame", 2))
	deadline := time.Now().Add(5 * time.Second)
	for logs.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if logs.Len() != 1 || logs.All()[0].ContextMap()["count"] != int64(2) {
		t.Fatalf("after the interval: %v, want one line with count 2", logs.AllUntimed())
	}
	log.Warn("payload CRC mismatch", zap.Int("frame", 3))
	for logs.Len() == 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if logs.Len() != 2 || logs.All()[1].ContextMap()["first"] != uint64(3) {
		t.Fatalf("second window: %v", logs.AllUntimed())
	}
}

func TestWrapTwice(t *testing.T) {
	obs, _ := observer.New(zapcore.InfoLevel)
	log := Wrap(zap.New(obs), 0)
	if Wrap(log, 0) != log {
		t.Error("an aggregated logger is wrapped again")
	}
}
