package serve

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
	"h5ingest/service"
	"h5ingest/source/fabric"
	"h5ingest/writer"
)

// TestServeFileAppearedNamesThePart: while a scan of the service writes
// x.h5, another file is put at that name. The scan leaves that file alone
// and ends failed with its frames in .x.h5.part; its result's file is the
// .part, not the other file, and its error says where the frames are.
func TestServeFileAppearedNamesThePart(t *testing.T) {
	const n, first = 12, 4
	recs := scantest.CaptureRecords(t, scantest.SimulateModule(t, scantest.BigFormat, n, 0))
	dir, addr := t.TempDir(), scantest.FreeAddr(t)
	s := startServed(t, serveProfile(scantest.BigFormat, addr, dir, 16, "deflate", 1), dir)
	s.arm("x", n)
	final, part := filepath.Join(dir, "x.h5"), writer.TempName(filepath.Join(dir, "x.h5"))

	go1, rest := make(chan struct{}), make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		snd, err := fabric.DialWait(ctx, fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: 30 * time.Second,
			Hello: fabric.Hello{Mode: fabric.ModeWrite, Format: scantest.BigFormat}})
		if err != nil {
			rest <- err
			return
		}
		for i, rec := range recs {
			if i == first {
				<-go1
			}
			buf, err := snd.Buffer(ctx)
			if err == nil {
				err = snd.Post(copy(buf, rec))
			}
			if err != nil {
				snd.Abort()
				rest <- err
				return
			}
		}
		_, err = snd.Close(ctx)
		rest <- err
	}()
	for deadline := time.Now().Add(60 * time.Second); s.status("x").Counts.Written < first-1 || !fileExists(part); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(go1)
			t.Fatalf("the first %d frames were not written: %+v", first-1, s.status("x"))
		}
	}
	if err := os.WriteFile(final, []byte("another file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	close(go1)
	st := s.wait("x")
	<-rest
	if b, err := os.ReadFile(final); err != nil || string(b) != "another file\n" {
		t.Errorf("the file put at x.h5 now holds %q (%v), want it untouched", b, err)
	}
	if st.State != service.Failed || !strings.Contains(st.Error, part) {
		t.Errorf("state %s, error %q: want failed, saying the frames are in %s", st.State, st.Error, part)
	}
	if len(st.Files) != 1 || st.Files[0].Path != part {
		t.Fatalf("files %+v, want the scan's, %s", st.Files, part)
	}
	if got := scantest.Statuses(t, part); got[frame.StatusOK] != n {
		t.Errorf("%s: statuses %v, want %d ok", part, got, n)
	}
}

// TestServeLockLinkRefused plants the lock file of a scan's output as a
// symbolic link to a file outside the output directory: the arm is
// refused with an error naming the lock file, and that file is left as it
// was.
func TestServeLockLinkRefused(t *testing.T) {
	dir, addr := t.TempDir(), scantest.FreeAddr(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lock := writer.LockName(filepath.Join(dir, "x.h5"))
	if err := os.Symlink(victim, lock); err != nil {
		t.Fatal(err)
	}
	s := startServed(t, serveProfile(scantest.BigFormat, addr, dir, 16, "deflate", 1), dir)
	resp, err := http.Post(s.base+"/v1/scans", "application/json",
		strings.NewReader(`{"profile": "served", "scan_id": "x", "plan": {"projections": 4}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	code, msg := resp.StatusCode, string(b)
	if code != http.StatusUnprocessableEntity || !strings.Contains(msg, lock) || !strings.Contains(msg, "symbolic link") {
		t.Errorf("arm with the lock file a link: status %d, %s; want 422, naming %s as a symbolic link", code, msg, lock)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("the file the lock links to holds %d bytes (%v), want it untouched", len(b), err)
	}
}

// TestServeModulesFileAppeared: while a scan of two modules writes, a file
// is put at module 1's final name. The result lists module 1's file as
// its .part, which holds its frames, and module 0's under its final name;
// the other file is left as it is.
func TestServeModulesFileAppeared(t *testing.T) {
	const n = 40
	port := scantest.FreePorts(t, 2)
	out := t.TempDir()
	ids := []int{0, 1}
	s := startNode(t, ids, map[string]string{"pair": arrayProfileText(ids, port, out, 30*time.Second)})
	caps := []string{scantest.SimulateModule(t, scantest.SmallFormat, n, 0), scantest.SimulateModule(t, scantest.SmallFormat, n, 1)}
	s.arm("pair", "ap", n)
	sent := []<-chan error{sendPaced(caps[0], port, 0, 40), sendPaced(caps[1], port+1, 1, 40)}
	var parts []string
	for deadline := time.Now().Add(30 * time.Second); len(parts) < 2; time.Sleep(20 * time.Millisecond) {
		parts, _ = filepath.Glob(filepath.Join(out, ".ap*.h5.part"))
		if time.Now().After(deadline) {
			t.Fatalf("no .part of both modules: %v", parts)
		}
	}
	part1 := parts[1] // sorted: module 1's
	intruder, _ := writer.FinalName(part1)
	if err := os.WriteFile(intruder, []byte("another file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := s.wait("ap")
	for _, c := range sent {
		<-c
	}
	if b, err := os.ReadFile(intruder); err != nil || string(b) != "another file\n" {
		t.Errorf("the file put at %s now holds %q (%v), want it untouched", intruder, b, err)
	}
	if st.State != service.Failed || !strings.Contains(st.Error, part1) {
		t.Errorf("state %s, error %q: want failed, saying module 1's frames are in %s", st.State, st.Error, part1)
	}
	var got []string
	for _, f := range st.Files {
		if f.Module == 1 {
			got = append(got, f.Path)
			if c := scantest.Statuses(t, f.Path); c[frame.StatusOK] != n {
				t.Errorf("%s: statuses %v, want %d ok", f.Path, c, n)
			}
		}
	}
	if len(got) != 1 || got[0] != part1 {
		t.Errorf("module 1's files %v, want its .part %s (all files %+v)", got, part1, st.Files)
	}
}
