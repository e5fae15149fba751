package scan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/scan/scantest"
	"h5ingest/source/fabric"
)

// slowLevel is the deflate level that makes the pipeline slower than a
// sender on loopback: a backlog in the ring.
func slowLevel() int {
	if scantest.Race {
		return 1
	}
	return 7
}

// TestAcquireLateModuleRefused stops a two-module acquire while only
// module 0 has connected, its ring full behind a slow pipeline; module 1
// connects during the drain. Its sender is refused at its hello, saying
// the scan has stopped; the acquire says module 1 connected after the
// stop and was refused (not that it never connected), writes module 0's
// frames that arrived, module 1's file with every frame missing and the
// master, and never says that no file was written.
func TestAcquireLateModuleRefused(t *testing.T) {
	const n, slots = 60, 32
	dir := t.TempDir()
	profile := filepath.Join(dir, "two.yaml")
	text := fmt.Sprintf("detector:\n  chips_x: 3\n  chips_y: 2\n  chip_width: 256\n  chip_height: 256\n  modules:\n"+
		"    - {id: 0, x: 0, y: 0}\n    - {id: 1, x: 800, y: 0}\nbackend: cpu\n"+
		"output:\n  compression: deflate\n  level: %d\nsource:\n  ring_slots: %d\n", slowLevel(), slots)
	if err := os.WriteFile(profile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	stages := scantest.Stages(t)
	p, err := config.Load(profile, stages.Names())
	if err != nil {
		t.Fatal(err)
	}
	addr := scantest.FreeAddr(t)
	o := acquireOptions(t, p, stages, plan.Tomo(0, 0, n, 0, 180), filepath.Join(dir, "two.h5"), addr)
	o.Record = filepath.Join(dir, "two.pmcap")
	acq := startAcquire(t, o)
	kill := make(chan struct{})
	defer close(kill)
	second := scantest.SimulateModule(t, scantest.BigFormat, n, 1)
	first := scantest.Send(scantest.SimulateModule(t, scantest.BigFormat, n, 0), addr, 0, kill)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(o.Record); err == nil && fi.Size() >= int64(slots)*int64(frame.HeaderSize+scantest.BigFormat.PayloadSize()) {
			break // module 0's ring is full
		}
		if time.Now().After(deadline) {
			select {
			case err := <-first:
				t.Fatalf("module 0's frames did not arrive: its sender ended: %v\n%s", err, acq.errs.String())
			default:
				t.Fatalf("module 0's frames did not arrive\n%s", acq.errs.String())
			}
		}
	}
	acq.stop.Request(syscall.SIGTERM)
	for acq.stop.signal() == nil {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	late := scantest.Send(second, addr, 1, kill)
	var refused *fabric.RefusedError
	select {
	case err := <-late:
		if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "the scan has stopped") {
			t.Errorf("the late module's sender: %v, want a refusal saying the scan has stopped", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the late module's sender got no answer")
	}
	if err := acq.wait(t, 2*time.Minute); !errors.Is(err, ErrIncomplete) {
		t.Errorf("acquire: %v, want ErrIncomplete", err)
	}
	<-first
	said := acq.errs.String() + acq.logs.String()
	if !strings.Contains(said, "module 1 connected after the stop and was refused") || strings.Contains(said, "never connected") || strings.Contains(said, "no file written") {
		t.Errorf("the acquire says:\n%s", said)
	}
	arrived := capturedByModule(t, o.Record)
	for _, f := range o.Files.Modules {
		got := scantest.Statuses(t, f.Path)
		if got[frame.StatusOK] != arrived[uint16(f.Module.ID)] || got[frame.StatusOK]+got[frame.StatusMissing] != n {
			t.Errorf("module %d: %v, %d arrived: want every frame that arrived ok, the rest missing", f.Module.ID, got, arrived[uint16(f.Module.ID)])
		}
	}
	if arrived[0] < slots || arrived[1] != 0 {
		t.Errorf("arrived %v: want module 0's ring and nothing of module 1", arrived)
	}
	if _, err := os.Stat(o.Files.Master); err != nil {
		t.Errorf("master: %v", err)
	}
}
