package scan

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"go.uber.org/zap"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/scan/scantest"
	"h5ingest/stream"
)

// liveFormat is the frame of the live stream's tests: 2 x 2 chips of 64 x
// 64, 12-bit bitplane.
var liveFormat = frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64},
	Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}

// TestLiveStreamSummary replays a scan with a live stream, once to a
// consumer and once to none: the summary and the log say how many images
// went out, why the others did not, and whether the end of series was
// delivered; with no consumer they say so, not that a queue was full.
func TestLiveStreamSummary(t *testing.T) {
	const frames = 12
	stages := scantest.Stages(t)
	capture := scantest.SimulateModule(t, liveFormat, frames, 0)
	pl := plan.Tomo(0, 0, frames, 0, 180)
	for _, tc := range []struct {
		name     string
		consumer bool
		want     LiveResult // in the summary, without Gaps
		errs     string     // in the warnings; "" none
	}{
		{"consumer", true, LiveResult{Stats: stream.Stats{Sent: frames, EndDelivered: true}, Ended: true}, ""},
		{"no consumer", false, LiveResult{Stats: stream.Stats{Dropped: frames, NoConsumer: frames}},
			"no consumer connected: the end of series was not sent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := "tcp://" + scantest.FreeAddr(t)
			got := make(chan int, 1)
			if tc.consumer {
				sock, err := zmq.NewSocket(zmq.PULL)
				if err != nil {
					t.Fatal(err)
				}
				defer sock.Close()
				sock.SetRcvtimeo(10 * time.Second)
				sock.SetLinger(0)
				if err := sock.Connect(ep); err != nil { // before the bind: ZeroMQ retries
					t.Fatal(err)
				}
				go func() {
					n := 0
					for {
						b, err := sock.RecvBytes(0)
						if err != nil {
							break
						}
						n++
						if strings.Contains(string(b[:min(len(b), 16)]), "end") {
							break
						}
					}
					got <- n
				}()
			}
			p := testProfile(t, stages, liveFormat, map[string]any{"stream.address": ep, "stream.queue": frames})
			r := replayInto(t, context.Background(), p, stages, pl, filepath.Join(t.TempDir(), "live.h5"), capture)
			if r.err != nil {
				t.Fatalf("replay: %v\n%s", r.err, r.errs)
			}
			if len(r.res.Modules) != 1 || r.res.Modules[0].Live == nil {
				t.Fatalf("the result has no live stream: %+v", r.res)
			}
			m := r.res.Modules[0]
			live := *m.Live
			live.Gaps = 0
			if live != tc.want {
				t.Errorf("the summary's stream %+v, want %+v", live, tc.want)
			}
			var warned []string
			for _, n := range m.Notes {
				if n.Kind == Warning {
					warned = append(warned, n.Text)
				}
			}
			if tc.errs == "" && len(warned) > 0 || tc.errs != "" && (len(warned) != 1 || !strings.Contains(warned[0], tc.errs)) {
				t.Errorf("warnings %q, want %q", warned, tc.errs)
			}
			if logged := strings.Contains(r.logs, `"msg":"live stream ended"`) && strings.Contains(r.logs, `"end_delivered":false`); logged != !tc.consumer {
				t.Errorf("the log (warnings) says the end was not delivered: %v, want %v:\n%s", logged, !tc.consumer, r.logs)
			}
			if tc.consumer {
				if n := <-got; n != frames+2 {
					t.Errorf("the consumer got %d messages, want the start, %d images and the end", n, frames)
				}
			}
		})
	}
}

// TestLiveStreamMetrics: /metrics counts a scan's stream images by
// outcome and says whether its end was delivered.
func TestLiveStreamMetrics(t *testing.T) {
	const frames = 6
	stages := scantest.Stages(t)
	capture := scantest.SimulateModule(t, liveFormat, frames, 0)
	p := testProfile(t, stages, liveFormat, map[string]any{"stream.address": "tcp://" + scantest.FreeAddr(t)})
	obs := NewServingObserver(zap.NewNop())
	files, err := NewFiles(p, Names{Output: filepath.Join(t.TempDir(), "m.h5")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Replay(context.Background(), ReplayOptions{
		Options:  Options{Profile: p, Plan: plan.Tomo(0, 0, frames, 0, 180), Stages: stages},
		Captures: []string{capture}, Files: files, Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	obs.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`h5ingest_stream_images_total{module="0",outcome="no_consumer"} 6`,
		`h5ingest_stream_images_total{module="0",outcome="sent"} 0`,
		`h5ingest_stream_images_total{module="0",outcome="slow_consumer"} 0`,
		`h5ingest_stream_end_delivered{module="0"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
	}
}
