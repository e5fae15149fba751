package roce

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/receive"
)

// openStation opens a station of s, closed with the test.
func openStation(t *testing.T, s receive.Setup) receive.Station {
	t.Helper()
	station, err := OpenStation(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { station.Close() })
	return station
}

// fixedFrontEnd returns a setup whose profile gives the front end's ends
// (source.front_end), as a firmware fixes them.
func fixedFrontEnd(t *testing.T) receive.Setup {
	return setup(t.TempDir(), func(s *config.Source) {
		s.FrontEnd = []config.FrontEnd{{Module: 0, GID: "fe80::2", QPN: 0x99, PSN: 5}}
	})
}

// takeAll takes every frame of a scan's stream up to its plan's end, and
// returns how many passed Intact with the capture's bytes.
func takeAll(t *testing.T, st receive.Stream, truth map[uint64][]byte) int {
	t.Helper()
	got, err := drain(t, context.Background(), st, truth)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("after %d frames: %v", len(got), err)
	}
	return len(got)
}

// TestStationScanAfterScan sets the queue pair up once, as serve does,
// and runs three scans through it, each from a front end started afresh
// (a new queue pair of its own, as the emulator's is): each scan starts
// with an empty ring and a new nonce, stale answers are not taken, and
// every frame of every scan arrives whole, the counts per scan.
func TestStationScanAfterScan(t *testing.T) {
	dir := fakeVerbs(t)
	const n = 30
	path, truth := capturePath(t, n)
	s := setup(dir, func(s *config.Source) { s.RingSlots = 2 * n })
	station := openStation(t, s)
	qpn := station.Params().(View).Params.Modules[0].QPN
	nonces := map[string]bool{}
	for scan := range 3 {
		setup := s
		setup.Frames = n
		l, err := station.Scan(setup)
		if err != nil {
			t.Fatalf("scan %d: %v", scan, err)
		}
		p := station.Params().(View).Params
		if nonces[p.Nonce] || p.Ready || p.Modules[0].Ready {
			t.Fatalf("scan %d: parameters %+v: want a new nonce, not ready", scan, p)
		}
		nonces[p.Nonce] = true
		if p.Modules[0].QPN != qpn {
			t.Fatalf("scan %d: QPN %d, want the station's %d kept", scan, p.Modules[0].QPN, qpn)
		}
		ctx, cancel := context.WithCancel(context.Background())
		sent := emulate(t, ctx, dir, path, 0)
		st, err := l.Accept(ctx)
		if err != nil {
			t.Fatalf("scan %d: %v", scan, err)
		}
		got := takeAll(t, st, truth)
		if err := <-sent; err != nil {
			t.Fatalf("scan %d: the front end: %v", scan, err)
		}
		if stats := st.Stats(); got != n || stats.Frames != n || stats.Overrun != 0 || stats.Gaps != 0 {
			t.Errorf("scan %d: %d intact, stats %+v: want %d, each scan counted alone", scan, got, stats, n)
		}
		st.Close()
		l.Close()
		cancel()
		if _, err := os.Stat(s.ParamsFile); err != nil {
			t.Fatalf("scan %d: the parameter file is gone between scans: %v", scan, err)
		}
		// Between scans no scan takes frames: neither GET /v1/rdma nor
		// the file says ready.
		var file Params
		if err := readJSON(s.ParamsFile, &file); err != nil {
			t.Fatal(err)
		}
		for _, p := range []Params{station.Params().(View).Params, file} {
			if p.Ready || p.Modules[0].Ready {
				t.Errorf("scan %d ended: parameters %+v say ready", scan, p)
			}
		}
	}
}

// TestStationRefuses checks what a station refuses: a scan of another
// ring or queue pair type than it set up, a module it has no queue pair
// for, a module already in a scan, and front end's ends from a control
// system where the profile fixes them.
func TestStationRefuses(t *testing.T) {
	dir := fakeVerbs(t)
	s := setup(dir, nil)
	station := openStation(t, s)
	for _, tc := range []struct {
		name string
		edit func(*receive.Setup)
		want string
	}{
		{"another ring", func(s *receive.Setup) { s.Source.RingSlots = 32 }, "ring_slots"},
		{"another queue pair type", func(s *receive.Setup) { s.Source.QPType = "uc" }, "qp_type"},
		{"another module", func(s *receive.Setup) { s.Modules = []int{3} }, "module 3"},
		// The same bytes a frame, other chips: the stream would hand out
		// frames of the station's format, which the scan refuses.
		{"another chip layout", func(s *receive.Setup) {
			s.Format.ChipsX, s.Format.ChipsY = s.Format.ChipsY, s.Format.ChipsX
		}, "detector"},
		{"another coding", func(s *receive.Setup) { s.Format.Coding = frame.Binary }, "detector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setup := s
			tc.edit(&setup)
			if _, err := station.Scan(setup); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Scan: %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
	l, err := station.Scan(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := station.Scan(s); err == nil || !strings.Contains(err.Error(), "in a scan") {
		t.Fatalf("a second scan of a module in a scan: %v, want refused", err)
	}
	l.Close()
	if l, err = station.Scan(s); err != nil {
		t.Fatalf("a scan once the last was closed: %v", err)
	}
	l.Close()

	fixedStation := openStation(t, fixedFrontEnd(t))
	if err := fixedStation.SetPeers([]byte(`{"modules":[{"module":0,"gid":"fe80::3","qpn":7,"psn":1}]}`)); !errors.Is(err, receive.ErrPeersFixed) {
		t.Fatalf("SetPeers where the profile gives the front end: %v, want ErrPeersFixed", err)
	}
}

// TestStationSetPeers gives the front end's end as a control system does
// (PUT /v1/rdma), checks what is refused, and runs a scan from it: no
// front end's file is read.
func TestStationSetPeers(t *testing.T) {
	dir := fakeVerbs(t)
	const n = 20
	path, truth := capturePath(t, n)
	s := setup(dir, func(s *config.Source) { s.RingSlots = 2 * n })
	s.PeerFile = "" // a control system gives the ends
	station := openStation(t, s)
	for _, bad := range []string{
		`{"modules":[{"module":1,"gid":"fe80::3","qpn":7,"psn":1}]}`,
		`{"modules":[{"module":0,"gid":"not a gid","qpn":7,"psn":1}]}`,
		`{"modules":[{"module":0,"gid":"fe80::3%eth0","qpn":7,"psn":1}]}`,
		`{"modules":[{"module":0,"gid":"::","qpn":7,"psn":1}]}`,
		`{"modules":[{"module":0,"gid":"0.0.0.0","qpn":7,"psn":1}]}`,
		`{"modules":[{"module":0,"gid":"ff02::1","qpn":7,"psn":1}]}`,
		`{"modules":[]}`,
		`{"modules":[{"module":0,"gid":"fe80::3","qpn":7,"psn":1}],"extra":1}`,
		`not json`,
	} {
		if err := station.SetPeers([]byte(bad)); err == nil {
			t.Errorf("SetPeers(%s) taken, want refused", bad)
		}
	}
	// The emulator brings its queue pair up from the receiver's file and
	// answers in its own; the control system passes that answer on.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	setup := s
	setup.Frames = n
	l, err := station.Scan(setup)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	feFile := filepath.Join(dir, "front-end.json")
	sent := make(chan error, 1)
	go func() {
		_, err := Send(ctx, SendConfig{Port: 1, ParamsFile: s.ParamsFile, FrontEndFile: feFile, Timeout: s.Source.ConnectTimeout}, path)
		sent <- err
	}()
	var fe FrontEndParams
	if err := waitFile(ctx, feFile, time.Now().Add(s.Source.ConnectTimeout), &fe, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	fe.Nonce = "" // a firmware's fixed ends answer no scan
	b, _ := json.Marshal(fe)
	if err := station.SetPeers(b); err != nil {
		t.Fatal(err)
	}
	st, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := takeAll(t, st, truth); got != n {
		t.Errorf("%d frames intact, want %d", got, n)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// TestStationOldFrontEndStillWriting arms a scan while the last scan's
// front end still writes into the station's queue pair (a scan cancelled
// mid-write, the next armed at once), in each immediate mode: what it
// writes before the new scan's front end is linked is another scan's and
// is not taken; the new scan's frames are all its own front end's, whole,
// and numbered from its first write.
func TestStationOldFrontEndStillWriting(t *testing.T) {
	for _, immediate := range []string{"frame", "slot"} {
		t.Run(immediate, func(t *testing.T) {
			dir := fakeVerbs(t)
			const n = 30
			oldPath, _ := capturePathSeed(t, 1000, 99)
			path, truth := capturePath(t, n)
			s := setup(dir, func(s *config.Source) { s.RingSlots, s.Immediate = 2*n, immediate })
			station := openStation(t, s)
			stream := station.(*Station).st.streams[0]

			first := s
			first.Frames = 1000
			l, err := station.Scan(first)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			old := emulate(t, ctx, dir, oldPath, 100) // a front end that goes on writing
			st, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				f, err := st.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				st.Release(f)
			}
			st.Close() // the scan is cancelled; its front end writes on
			l.Close()

			next := s
			next.Frames = n
			if l, err = station.Scan(next); err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			came := func() uint64 {
				stream.mu.Lock()
				defer stream.mu.Unlock()
				return stream.stats.Frames + stream.foreign
			}
			// The arming resets the queue pair toward the old front end,
			// whose writes then fail (it ends); what came meanwhile is not
			// taken.
			oldEnded := false
			for deadline := time.Now().Add(20 * time.Second); came() < 5 && !oldEnded; time.Sleep(time.Millisecond) {
				select {
				case <-old:
					oldEnded = true
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("the last scan's front end neither wrote on (%d frames) nor ended", came())
				}
			}
			stream.mu.Lock()
			waiting, counted := stream.qLen, stream.stats.Frames
			stream.mu.Unlock()
			if waiting != 0 || counted != 0 {
				t.Errorf("%d frames of the last scan's front end wait to be handed to the next scan, %d counted as its own: want none", waiting, counted)
			}
			sent := emulate(t, ctx, dir, path, 0)
			if st, err = l.Accept(ctx); err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if got := takeAll(t, st, truth); got != n {
				t.Errorf("%d frames of the scan's own front end intact, want %d", got, n)
			}
			if err := <-sent; err != nil {
				t.Fatalf("the scan's front end: %v", err)
			}
			if stats := st.Stats(); stats.Frames != n || stats.Disordered != 0 || stats.Undelivered != 0 {
				t.Errorf("the scan's counts %+v: want its own front end's %d frames alone", stats, n)
			}
			cancel()
			if !oldEnded {
				<-old
			}
		})
	}
}

// TestNoFrameNamesTheFrontEnd: a scan whose front end's ends a control
// system gave (PUT /v1/rdma) and from which no frame comes says which
// ends its queue pair was linked to, and whence they came, beside its
// own: the ends of an earlier PUT are kept for every scan after it.
func TestNoFrameNamesTheFrontEnd(t *testing.T) {
	dir := fakeVerbs(t)
	s := setup(dir, func(s *config.Source) { s.ConnectTimeout = 200 * time.Millisecond })
	station := openStation(t, s)
	if err := station.SetPeers([]byte(`{"modules":[{"module":0,"gid":"fe80::9","qpn":77,"psn":1}]}`)); err != nil {
		t.Fatal(err)
	}
	setup := s
	setup.Frames = 3
	l, err := station.Scan(setup)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := l.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.Next(context.Background())
	for _, want := range []string{"no frame from the front end", "QPN 77 on GID fe80::9", "SetPeers"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Next with no front end writing: %v, want it to say %q", err, want)
		}
	}
}

// TestStationClearPeers gives ends that are no front end's (a PUT gone
// wrong), which GET /v1/rdma shows as the request's, then forgets them
// (DELETE /v1/rdma): the next scan meets its front end through the file
// again and takes every frame. A profile's ends are not forgotten.
func TestStationClearPeers(t *testing.T) {
	dir := fakeVerbs(t)
	const n = 20
	path, truth := capturePath(t, n)
	s := setup(dir, func(s *config.Source) { s.RingSlots = 2 * n })
	station := openStation(t, s)
	if err := station.SetPeers([]byte(`{"modules":[{"module":0,"gid":"fe80::9","qpn":77,"psn":1}]}`)); err != nil {
		t.Fatal(err)
	}
	if v := station.Params().(View); v.FrontEndFrom != "request" || len(v.FrontEnd) != 1 || v.FrontEnd[0].QPN != 77 {
		t.Errorf("after a PUT, GET shows %+v: want the request's ends", v)
	}
	if err := station.ClearPeers(); err != nil {
		t.Fatal(err)
	}
	if v := station.Params().(View); v.FrontEndFrom != "" || v.FrontEnd != nil {
		t.Errorf("after a DELETE, GET shows %+v: want no ends given", v)
	}
	next := s
	next.Frames = n
	l, err := station.Scan(next)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := emulate(t, ctx, dir, path, 0)
	st, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := takeAll(t, st, truth); got != n {
		t.Errorf("%d frames intact, want %d", got, n)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}

	fixedStation := openStation(t, fixedFrontEnd(t))
	if err := fixedStation.ClearPeers(); !errors.Is(err, receive.ErrPeersFixed) {
		t.Errorf("ClearPeers where the profile gives the ends: %v, want ErrPeersFixed", err)
	}
	if v := fixedStation.Params().(View); v.FrontEndFrom != "profile" || len(v.FrontEnd) != 1 {
		t.Errorf("GET where the profile gives the ends: %+v", v)
	}
}
