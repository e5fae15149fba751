package scan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/writer"
)

// The end-to-end faults of a scan, run through the library as the scan
// service runs them: no h5ingest binary, the sender in the same process.

// testProfile returns the defaults for frames of f with the keys given
// on top, as a command line would set them.
func testProfile(t *testing.T, stages *registry.Registry, f frame.Format, keys map[string]any) config.Profile {
	t.Helper()
	flags := map[string]config.FlagValue{
		"detector.chips_x": {Flag: "test", Value: f.ChipsX}, "detector.chips_y": {Flag: "test", Value: f.ChipsY},
		"detector.chip_width": {Flag: "test", Value: f.ChipWidth}, "detector.chip_height": {Flag: "test", Value: f.ChipHeight},
		"backend": {Flag: "test", Value: "cpu"},
	}
	for k, v := range keys {
		flags[k] = config.FlagValue{Flag: "test", Value: v}
	}
	p, _, err := config.LoadLayers(config.Layers{Flags: flags, Names: stages.Names()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// capturedByModule returns how many frames of each module the capture at
// path holds.
func capturedByModule(t *testing.T, path string) map[uint16]int {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := map[uint16]int{}
	buf := make([]byte, scantest.BigFormat.PayloadSize())
	for {
		h, _, err := r.Next(buf)
		if errors.Is(err, io.EOF) {
			return n
		} else if err != nil {
			t.Fatal(err)
		}
		n[h.ModuleID]++
	}
}

// captured returns how many frames the capture at path holds.
func captured(t *testing.T, path string) int {
	t.Helper()
	total := 0
	for _, n := range capturedByModule(t, path) {
		total += n
	}
	return total
}

// TestAcquireBacklogDrains runs an acquire whose ring (16 slots) fills
// behind a slow pipeline (deflate at level 7), then ends it with a stop
// request (SIGTERM, the service's stop) and with the sender dropping its
// connection: either way every frame that arrived, and only those, is
// written and in the --record capture, and the rest are recorded missing.
func TestAcquireBacklogDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 60 frames of 1.2 MB through a slow pipeline")
	}
	const n, slots = 60, 16
	src := scantest.SimulateModule(t, scantest.BigFormat, n, 0)
	stages := scantest.Stages(t)
	level := 7
	if scantest.Race {
		level = 1
	}
	for _, end := range []string{"stop", "sender dropped"} {
		t.Run(end, func(t *testing.T) {
			dir := t.TempDir()
			out, rec, addr := filepath.Join(dir, "scan.h5"), filepath.Join(dir, "scan.pmcap"), scantest.FreeAddr(t)
			p := testProfile(t, stages, scantest.BigFormat, map[string]any{"output.compression": "deflate", "output.level": level,
				"source.ring_slots": slots, "source.idle_timeout": 20 * time.Second})
			files, err := NewFiles(p, Names{Output: out})
			if err != nil {
				t.Fatal(err)
			}
			a, err := NewAcquisition(AcquireOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, n, 0, 180), Stages: stages},
				Files: files, Listen: addr, Record: rec})
			if err != nil {
				t.Fatal(err)
			}
			stop := NewStopper(context.Background(), 30*time.Second, nil)
			defer stop.Close()
			result := make(chan error, 1)
			go func() { _, err := a.Run(stop); result <- err }()
			kill := make(chan struct{})
			sent := scantest.Send(src, addr, 0, kill)
			// More frames arrived than the ring holds: a backlog.
			frameSize := int64(frame.HeaderSize + scantest.BigFormat.PayloadSize())
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if fi, err := os.Stat(rec); err == nil && fi.Size() >= frameSize*(slots+4) {
					break
				}
			}
			if end == "stop" {
				stop.Request(syscall.SIGTERM)
			} else {
				close(kill)
			}
			var runErr error
			select {
			case runErr = <-result:
			case <-time.After(2 * time.Minute):
				t.Fatal("the acquire did not end")
			}
			if end == "stop" {
				close(kill)
			}
			<-sent
			got := scantest.Statuses(t, out)
			recorded := captured(t, rec)
			t.Logf("%s: %d ok, %d missing, %d recorded; run: %v", end, got[frame.StatusOK], got[frame.StatusMissing], recorded, runErr)
			if !errors.Is(runErr, ErrIncomplete) {
				t.Errorf("run: %v, want ErrIncomplete (frames missing)", runErr)
			}
			if got[frame.StatusOK] != recorded || got[frame.StatusOK]+got[frame.StatusMissing] != n {
				t.Errorf("%d ok and %d missing of %d, %d in the capture: every frame that arrived must be written, the rest missing",
					got[frame.StatusOK], got[frame.StatusMissing], n, recorded)
			}
			if recorded < slots || recorded >= n {
				t.Errorf("%d frames arrived: no backlog to drain (a ring of %d, a scan of %d)", recorded, slots, n)
			}
		})
	}
}

// TestReplayFramesBeyondPlan replays a capture of 12 frames with a plan
// of 8: the four frames beyond the plan are rejected, as the spec says,
// with a summary line, a line saying where they went and a log line; the
// eight planned frames are all good, and the scan is incomplete, not a
// success. That the capture records another plan is said first.
func TestReplayFramesBeyondPlan(t *testing.T) {
	src, truth := scantest.Simulate(t, simScan(scantest.SmallFormat, 12))
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	out := filepath.Join(t.TempDir(), "scan.h5")
	r := replayInto(t, context.Background(), p, stages, plan.Tomo(0, 0, 8, 0, 180), out, src)
	if !errors.Is(r.err, ErrIncomplete) {
		t.Errorf("replay of 12 frames with a plan of 8: %v, want ErrIncomplete", r.err)
	}
	if c := r.summary().Progress; c.OK != 8 || c.OutOfRange != 4 {
		t.Errorf("summary: %d ok, %d out of range; want 8 and 4:\n%s", c.OK, c.OutOfRange, r.out)
	}
	for _, want := range []string{
		"4 frames beyond the scan were rejected (frame numbers 8 and above, past the plan's 8 frames",
		fmt.Sprintf("records the plan %v; the replay writes the plan given, %v", plan.Tomo(0, 0, 12, 0, 180), plan.Tomo(0, 0, 8, 0, 180)),
	} {
		if !strings.Contains(r.errs, want) {
			t.Errorf("the scan does not say %q:\n%s", want, r.errs)
		}
	}
	for _, want := range []string{`"frame rejected"`, `"reason":"out of range"`} {
		if !strings.Contains(r.logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, r.logs)
		}
	}
	if status, ok := scantest.CheckTruth(t, out, truth); len(status) != 8 || ok != 8 {
		t.Errorf("file holds %d frames, %d ok: want the 8 planned, all ok", len(status), ok)
	}
}

// TestAcquireRingLimit checks that a ring of the profile's frames larger
// than source.ring_max_bytes is the profile's fault, named by its keys,
// before anything listens.
func TestAcquireRingLimit(t *testing.T) {
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.BigFormat, map[string]any{"source.ring_slots": 64, "source.ring_max_bytes": 8 << 20})
	files, err := NewFiles(p, Names{Output: filepath.Join(t.TempDir(), "scan.h5")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewAcquisition(AcquireOptions{Options: Options{Profile: p, Stages: stages}, Files: files, Listen: scantest.FreeAddr(t)})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "source.ring_slots") || !strings.Contains(err.Error(), "source.ring_max_bytes") {
		t.Errorf("a 64-slot ring of 1.2 MB frames under 8 MiB: %v, want a usage error naming both keys", err)
	}
}

// TestAcquireRefusesOtherFormats connects, before the real detector,
// senders that announce another frame format than the profile's detector
// (805 MB frames, another bit depth) or frames larger than its own
// (699 MB): each is refused (code 5, RefuseScan) saying why, the acquire's
// memory stays small, and it goes on to take the real sender's whole scan.
func TestAcquireRefusesOtherFormats(t *testing.T) {
	const n = 6
	src := scantest.SimulateModule(t, scantest.BigFormat, n, 0)
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.BigFormat, nil)
	out, addr := filepath.Join(t.TempDir(), "scan.h5"), scantest.FreeAddr(t)
	files, err := NewFiles(p, Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAcquisition(AcquireOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, n, 0, 180), Stages: stages}, Files: files, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	stop := NewStopper(context.Background(), 30*time.Second, nil)
	defer stop.Close()
	measured := resetPeakRSS(t)
	result := make(chan error, 1)
	go func() { _, err := a.Run(stop); result <- err }()
	huge := frame.Format{Geometry: frame.Geometry{ChipsX: 16, ChipsY: 16, ChipWidth: 1024, ChipHeight: 1024},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	other := scantest.BigFormat
	other.BitDepth = 12
	for _, tt := range []struct {
		name  string
		hello fabric.Hello
		text  string
	}{
		{"format of 805 MB frames", fabric.Hello{Mode: fabric.ModeWrite, Format: huge}, "frame format"},
		{"other bit depth", fabric.Hello{Mode: fabric.ModeWrite, Format: other}, "frame format"},
		{"699 MB frames", fabric.Hello{Mode: fabric.ModeWrite, Format: scantest.BigFormat, MaxFrame: 699_000_000}, "frames of up to 699000000 bytes"},
	} {
		cfg := fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: 10 * time.Second, Hello: tt.hello}
		var refused *fabric.RefusedError
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			s, err := fabric.Dial(context.Background(), cfg)
			if err == nil {
				s.Abort()
				t.Fatalf("%s: the sender was taken", tt.name)
			}
			if errors.As(err, &refused) {
				break
			}
		}
		if refused == nil || refused.Code != fabric.RefuseScan || !strings.Contains(refused.Reason, tt.text) ||
			(tt.text == "frame format" && !strings.Contains(refused.Reason, "this receiver expects")) {
			t.Errorf("%s: %v, want a refusal with code %d about %q", tt.name, refused, fabric.RefuseScan, tt.text)
		}
	}
	if measured {
		if peak := peakRSS(t); peak > 512<<20 {
			t.Errorf("the acquire's peak memory is %d MB after refusing huge frames", peak>>20)
		} else {
			t.Logf("peak memory after the refusals: %d MB", peak>>20)
		}
	}
	if err := <-scantest.Send(src, addr, 0, make(chan struct{})); err != nil {
		t.Fatalf("the real sender: %v", err)
	}
	if err := <-result; err != nil {
		t.Errorf("acquire: %v, want the whole scan", err)
	}
	if got := scantest.Statuses(t, out); got[frame.StatusOK] != n {
		t.Errorf("statuses %v, want %d ok", got, n)
	}
}

// TestAcquireModulesDrainOnStop receives two modules at once, each ring
// full behind a slow pipeline, and stops the scan: every frame of each
// module that arrived is in that module's file, the rest missing, and the
// master file shows both.
func TestAcquireModulesDrainOnStop(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 2 x 40 frames of 1.2 MB through a slow pipeline")
	}
	const n, slots = 40, 16
	dir := t.TempDir()
	profile := filepath.Join(dir, "two.yaml")
	text := "detector:\n  chips_x: 3\n  chips_y: 2\n  chip_width: 256\n  chip_height: 256\n  modules:\n" +
		"    - {id: 0, x: 0, y: 0}\n    - {id: 1, x: 800, y: 0}\nbackend: cpu\n" +
		"output:\n  compression: deflate\n  level: 7\nsource:\n  ring_slots: 16\n"
	if err := os.WriteFile(profile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	stages := scantest.Stages(t)
	p, err := config.Load(profile, stages.Names())
	if err != nil {
		t.Fatal(err)
	}
	if scantest.Race {
		p.Output.Level = 1
	}
	files, err := NewFiles(p, Names{Output: filepath.Join(dir, "two.h5")})
	if err != nil {
		t.Fatal(err)
	}
	addr := scantest.FreeAddr(t)
	rec := filepath.Join(dir, "two.pmcap")
	a, err := NewAcquisition(AcquireOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, n, 0, 180), Stages: stages},
		Files: files, Listen: addr, Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	// Both captures are made before the acquire waits: under -race on a
	// loaded machine, making the second took longer than the first's
	// whole scan.
	caps := []string{scantest.SimulateModule(t, scantest.BigFormat, n, 0), scantest.SimulateModule(t, scantest.BigFormat, n, 1)}
	stop := NewStopper(context.Background(), 30*time.Second, nil)
	defer stop.Close()
	result := make(chan error, 1)
	go func() { _, err := a.Run(stop); result <- err }()
	kill := make(chan struct{})
	var sent []<-chan error
	for m := range uint16(2) {
		sent = append(sent, scantest.Send(caps[m], addr, m, kill))
	}
	for _, f := range files.Modules { // both scans begun
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(writer.TempName(f.Path)); err == nil {
				break
			}
		}
	}
	time.Sleep(time.Second) // the rings fill
	stop.Request(syscall.SIGTERM)
	if err := <-result; !errors.Is(err, ErrIncomplete) {
		t.Errorf("run: %v, want ErrIncomplete", err)
	}
	close(kill)
	for _, s := range sent {
		<-s
	}
	arrived := capturedByModule(t, rec)
	for _, f := range files.Modules {
		got := scantest.Statuses(t, f.Path)
		t.Logf("module %d: %v, %d arrived", f.Module.ID, got, arrived[uint16(f.Module.ID)])
		if ok := got[frame.StatusOK]; ok == 0 || ok != arrived[uint16(f.Module.ID)] || ok+got[frame.StatusMissing] != n {
			t.Errorf("module %d: %v with %d arrived, want every frame that arrived ok and the rest missing", f.Module.ID, got, arrived[uint16(f.Module.ID)])
		}
	}
	r, err := writer.OpenPlain(files.Master)
	if err != nil {
		t.Fatalf("master: %v", err)
	}
	defer r.Close()
	if len(r.Modules) != 2 || r.Frames != n {
		t.Errorf("master of %d modules and %d frames, want 2 and %d", len(r.Modules), r.Frames, n)
	}
}

// TestAcquireModulesBesideHostilePeers receives two modules while peers
// that are no detector connect: raw TCP connections that close at once,
// stay silent or send garbage, and libfabric senders of another frame
// format as module 0 and as module 1. Each is refused (those saying a
// hello with code 5, logged "sender refused") or dropped; none ends or
// holds up the scan: both real senders are taken at once, every frame of
// both is written, and no module is said never to have connected (before:
// module 1's sender was turned away).
func TestAcquireModulesBesideHostilePeers(t *testing.T) {
	const n = 5
	dir := t.TempDir()
	stages := scantest.Stages(t)
	p := profileText(t, stages, "detector:\n  chips_x: 3\n  chips_y: 2\n  chip_width: 32\n  chip_height: 16\n  modules:\n"+
		"    - {id: 0, x: 0, y: 0}\n    - {id: 1, x: 100, y: 0}\n", map[string]any{"source.connect_timeout": 30 * time.Second})
	files, err := NewFiles(p, Names{Output: filepath.Join(dir, "two.h5")})
	if err != nil {
		t.Fatal(err)
	}
	addr := scantest.FreeAddr(t)
	acq := startAcquire(t, AcquireOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, n, 0, 180), Stages: stages}, Files: files, Listen: addr})

	var conns []net.Conn
	for deadline := time.Now().Add(20 * time.Second); len(conns) < 3 && time.Now().Before(deadline); {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		conns = append(conns, c)
	}
	if len(conns) < 3 {
		t.Fatal("the receiver never listened")
	}
	conns[0].Close()                                            // closes at once
	conns[2].Write([]byte("GET / HTTP/1.0\r\n\r\nnot a hello")) // garbage; conns[1] stays silent
	defer conns[1].Close()
	defer conns[2].Close()
	other := scantest.SmallFormat
	other.BitDepth = 12
	for m := range uint16(2) {
		s, err := fabric.Dial(context.Background(), fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: 10 * time.Second,
			Hello: fabric.Hello{Module: m, Mode: fabric.ModeWrite, Format: other}})
		if err == nil {
			s.Abort()
		}
		var refused *fabric.RefusedError
		if !errors.As(err, &refused) || refused.Code != fabric.RefuseScan {
			t.Errorf("a hello of another format as module %d: %v, want refused with code %d", m, err, fabric.RefuseScan)
		}
	}
	start := time.Now()
	var sent []<-chan error
	for m := range uint16(2) {
		sent = append(sent, scantest.SendHello(scantest.SimulateModule(t, scantest.SmallFormat, n, m), addr, fabric.Hello{Module: m, Mode: fabric.ModeWrite, Format: scantest.SmallFormat}, 0, make(chan struct{})))
	}
	for m, s := range sent {
		if err := <-s; err != nil {
			t.Errorf("real sender of module %d: %v", m, err)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("the real senders took %v: held up by the others", d)
	}
	if err := acq.wait(t, 30*time.Second); err != nil || strings.Contains(acq.errs.String(), "never connected") {
		t.Errorf("acquire: %v, want both modules whole:\n%s", err, acq.errs.String())
	}
	if n := strings.Count(acq.logs.String(), `"sender refused"`); n < 2 {
		t.Errorf("the acquire logged %d refusals, want one for each bad hello:\n%s", n, acq.logs.String())
	}
	if n := strings.Count(acq.errs.String(), "a sender was refused, its frames in no file: "); n < 1 || !strings.Contains(acq.errs.String(), "frame format") {
		t.Errorf("the acquire's notes say %d refusals, want the bad hellos' (another frame format) noted on the scan:\n%s", n, acq.errs.String())
	}
	for _, f := range files.Modules {
		if got := scantest.Statuses(t, f.Path); got[frame.StatusOK] != n {
			t.Errorf("module %d: %v, want %d ok", f.Module.ID, got, n)
		}
	}
}

// acquireBig starts an acquire of n scantest.BigFormat frames into dir with a
// 16-slot ring behind a slow pipeline and its sender, and returns them;
// its result goes to got before its error to result.
func acquireBig(t *testing.T, n int, stop *Stopper, kill <-chan struct{}, got *Result) (out string, result, sent <-chan error) {
	t.Helper()
	stages := scantest.Stages(t)
	level := 7
	if scantest.Race {
		level = 1
	}
	out, addr := filepath.Join(t.TempDir(), "scan.h5"), scantest.FreeAddr(t)
	p := testProfile(t, stages, scantest.BigFormat, map[string]any{"output.compression": "deflate", "output.level": level, "source.ring_slots": 16})
	files, err := NewFiles(p, Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAcquisition(AcquireOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, n, 0, 180), Stages: stages}, Files: files, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		r, err := a.Run(stop)
		*got = r
		res <- err
	}()
	return out, res, scantest.Send(scantest.SimulateModule(t, scantest.BigFormat, n, 0), addr, 0, kill)
}

// TestAcquireSecondStopAtOnce asks twice to stop an acquire whose ring is
// full: the second request stops it at once, the frames not yet written
// recorded missing, and it says so.
func TestAcquireSecondStopAtOnce(t *testing.T) {
	const n = 60
	var notes scantest.Buffer
	stop := NewStopper(context.Background(), 30*time.Second, notesTo(&notes))
	defer stop.Close()
	kill := make(chan struct{})
	var res Result
	out, result, sent := acquireBig(t, n, stop, kill, &res)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(writer.TempName(out)); err == nil {
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	stop.Request(os.Interrupt)
	time.Sleep(100 * time.Millisecond)
	stop.Request(os.Interrupt)
	if err := <-result; !errors.Is(err, ErrIncomplete) {
		t.Errorf("run: %v, want ErrIncomplete", err)
	}
	close(kill)
	<-sent
	if !strings.Contains(notes.String(), "interrupt again: stopping at once") {
		t.Errorf("the stopper says:\n%s", notes.String())
	}
	if got := scantest.Statuses(t, out); got[frame.StatusOK]+got[frame.StatusMissing] != n || got[frame.StatusMissing] == 0 {
		t.Errorf("statuses %v, want %d frames ok or missing, some missing", got, n)
	}
	// The frames in the ring when the second request came are not lost in
	// silence: every frame the stream received is written or discarded.
	if len(res.Modules) != 1 || res.Modules[0].Received == nil {
		t.Fatalf("result %+v, want one module's summary with what its connection received", res)
	}
	s := res.Modules[0]
	ok, discarded, received := s.Progress.OK, s.Progress.Discarded, int(s.Received.Frames)
	if ok+discarded != received || received == 0 {
		t.Errorf("%d ok and %d discarded of %d received: every frame that arrived is written or counted discarded", ok, discarded, received)
	}
	t.Logf("%d received: %d ok, %d discarded", received, ok, discarded)
}

// TestAcquireStoppedWhileWaiting asks an acquire to stop once it says it
// waits for the detector, before any connected: it ends long before its
// connect timeout, incomplete, saying so, and leaves no file.
func TestAcquireStoppedWhileWaiting(t *testing.T) {
	stages := scantest.Stages(t)
	dir := t.TempDir()
	p := testProfile(t, stages, scantest.BigFormat, nil)
	files, err := NewFiles(p, Names{Output: filepath.Join(dir, "scan.h5")})
	if err != nil {
		t.Fatal(err)
	}
	notify, waiting := waitingNote()
	a, err := NewAcquisition(AcquireOptions{Options: Options{Profile: p, Stages: stages, Notify: notify}, Files: files, Listen: scantest.FreeAddr(t),
		Record: filepath.Join(dir, "scan.pmcap")})
	if err != nil {
		t.Fatal(err)
	}
	stop := NewStopper(context.Background(), 10*time.Minute, nil)
	defer stop.Close()
	result := make(chan error, 1)
	go func() { _, err := a.Run(stop); result <- err }()
	select {
	case <-waiting:
	case err := <-result:
		t.Fatalf("the acquire ended before it waited for the detector: %v", err)
	}
	stop.Request(StopRequest{})
	select {
	case err = <-result:
	case <-time.After(time.Minute): // a real hang: the connect timeout is 10 minutes
		t.Fatal("the acquire did not end when asked to stop")
	}
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "interrupted (stop requested) while waiting for the detector") {
		t.Errorf("run: %v, want an incomplete scan saying it was stopped while waiting", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

// TestReplayTruncatedCapture replays a capture of 6 frames cut in the
// middle of its fourth: the three whole frames are ok and the scan is
// incomplete. With the plan the capture records, the rest of the plan is
// recorded missing; without a plan, a scan of unknown length ends at the
// last whole frame.
func TestReplayTruncatedCapture(t *testing.T) {
	simulated, _ := scantest.Simulate(t, simScan(scantest.SmallFormat, 6))
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	for _, tt := range []struct {
		name    string
		capture string
		want    []uint8
	}{
		{"plan recorded", simulated, []uint8{0, 0, 0, 1, 1, 1}},
		{"no plan", withoutPlan(t, simulated), []uint8{0, 0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "cut.pmcap")
			b, err := os.ReadFile(tt.capture)
			if err != nil {
				t.Fatal(err)
			}
			frameBytes := frame.HeaderSize + scantest.SmallFormat.PayloadSize()
			head := len(b) - 6*frameBytes
			if err := os.WriteFile(src, b[:head+3*frameBytes+frameBytes/2], 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "scan.h5")
			if r := replayInto(t, context.Background(), p, stages, plan.Plan{}, out, src); !errors.Is(r.err, ErrIncomplete) {
				t.Errorf("replay of a cut capture: %v, want ErrIncomplete", r.err)
			}
			var got []uint8
			for _, rec := range scantest.Records(t, out) {
				got = append(got, rec.Status)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("statuses %v, want %v", got, tt.want)
			}
		})
	}
}
