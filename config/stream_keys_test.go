package config

import (
	"strings"
	"testing"
	"time"
)

// TestStreamKeys loads the keys the live stream's start message carries
// and the stream's memory and linger, and refuses each out of range with
// an error naming the key.
func TestStreamKeys(t *testing.T) {
	p, err := Load(writeProfile(t, `detector:
  count_time_s: 0.0009
  frame_time_s: 0.001
  beam_center_px: [768.5, 770]
  sensor_material: CdTe
  sensor_thickness_m: 1.0e-3
  threshold_energy_ev: 5500
  serial_number: PM135D-0042
stream:
  address: tcp://127.0.0.1:31001
  queue: 16
  max_bytes: 536870912
  linger: 5s
`), testNames)
	if err != nil {
		t.Fatal(err)
	}
	d, s := p.Detector, p.Stream
	if d.CountTime != 0.0009 || d.FrameTime != 0.001 || len(d.BeamCenter) != 2 || d.BeamCenter[0] != 768.5 || d.BeamCenter[1] != 770 ||
		d.SensorMaterial != "CdTe" || d.SensorThickness != 1e-3 || d.Threshold != 5500 || d.SerialNumber != "PM135D-0042" {
		t.Errorf("detector %+v", d)
	}
	if s.Queue != 16 || s.MaxBytes != 512<<20 || s.Linger != 5*time.Second {
		t.Errorf("stream %+v", s)
	}
	def, err := Load("pimega-135d-tomo", testNames)
	if err != nil {
		t.Fatal(err)
	}
	if def.Detector.BeamCenter == nil || len(def.Detector.BeamCenter) != 0 || def.Detector.CountTime != 0 || def.Stream.Linger != 2*time.Second || def.Stream.MaxBytes != 1<<30 {
		t.Errorf("defaults: detector %+v, stream %+v", def.Detector, def.Stream)
	}

	for _, tc := range []struct{ name, text, want string }{
		{"count time", "detector:\n  count_time_s: -1\n", "key detector.count_time_s: -1, want seconds from 0 (not known) to 3600"},
		{"count time NaN", "detector:\n  count_time_s: .nan\n", "key detector.count_time_s: NaN"},
		{"frame time", "detector:\n  frame_time_s: 7200\n", "key detector.frame_time_s: 7200"},
		{"exposure past its frame", "detector:\n  count_time_s: 0.002\n  frame_time_s: 0.001\n", "key detector.count_time_s: 0.002 s, longer than detector.frame_time_s (0.001 s)"},
		{"beam centre of one", "detector:\n  beam_center_px: [3]\n", "key detector.beam_center_px: 1 values, want [x, y] or none"},
		{"beam centre NaN", "detector:\n  beam_center_px: [3, .nan]\n", "key detector.beam_center_px[1]: NaN"},
		{"thickness", "detector:\n  sensor_thickness_m: 1\n", "key detector.sensor_thickness_m: 1, want metres"},
		{"threshold", "detector:\n  threshold_energy_ev: -5\n", "key detector.threshold_energy_ev: -5"},
		{"linger", "stream:\n  linger: 0s\n", "key stream.linger: 0s, want 1ms to 1m"},
		{"linger too long", "stream:\n  linger: 1h\n", "key stream.linger: 1h0m0s, want 1ms to 1m"},
		{"max bytes", "stream:\n  max_bytes: 1000\n", "key stream.max_bytes: 1000, want 1048576 (1 MiB) or more"},
		// 1024 Pi-mega images of 9 MiB would hold 9 GiB.
		{"queue in bytes", "stream:\n  address: tcp://127.0.0.1:31001\n  queue: 1024\n",
			"key stream.queue: 1024 images of 9437184 bytes take 9663676416 bytes, more than stream.max_bytes (1073741824): lower stream.queue or raise stream.max_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Load(writeProfile(t, tc.text), testNames); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
	// Without a stream, its queue holds nothing: no limit applies.
	if _, err := Load(writeProfile(t, "stream:\n  queue: 1024\n"), testNames); err != nil {
		t.Errorf("queue of 1024 without a stream: %v", err)
	}
}
