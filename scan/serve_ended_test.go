package scan

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"weak"

	"go.uber.org/zap"

	"h5ingest/service"
)

// moduleCatcher is a service.Reporter that notes, weakly, the Module of
// the scan it reports for while the scan still shows it.
type moduleCatcher struct {
	s      *serveScan
	module weak.Pointer[Module]
	caught bool
}

func (c *moduleCatcher) Progress(service.Counts) {}

// FileFinalised comes before the end of Run lets the Module go from the
// scan's view: the Module is there to catch.
func (c *moduleCatcher) FileFinalised(service.File) {
	c.s.view.mu.Lock()
	m := c.s.view.module
	c.s.view.mu.Unlock()
	if m != nil {
		c.module, c.caught = weak.Make(m), true
	}
}

// TestServeScanEndedKeepsNoModule runs a scan as the service runs it
// (Prepare, Run) and checks that once Run has returned, the scan, which
// the service keeps for its status (the last 16 of them), holds on to
// nothing of its Module: its pipeline, stages and their buffers are
// collected.
func TestServeScanEndedKeepsNoModule(t *testing.T) {
	const n = 8
	dir, addr := t.TempDir(), freePort(t)
	profiles := t.TempDir()
	if err := os.WriteFile(filepath.Join(profiles, "served"), []byte(serveProfile(bigFormat, addr, dir, 16, "deflate", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Profiles: profiles, Log: zap.NewNop(), Stages: testStages(t)}
	armed, err := r.Prepare(context.Background(), service.ArmRequest{Profile: "served", ScanID: "ended", Plan: &service.Plan{Projections: n}})
	if err != nil {
		t.Fatal(err)
	}
	s := armed.(*serveScan)
	sent := send(t, simulate(t, bigFormat, n), addr, nil)
	c := &moduleCatcher{s: s}
	res := s.Run(context.Background(), c)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if res.State != service.Done || res.Counts.OK != n {
		t.Fatalf("the scan: %+v", res)
	}
	if !c.caught {
		t.Fatal("the scan never showed its Module")
	}
	runtime.GC()
	runtime.GC()
	if c.module.Value() != nil {
		t.Error("an ended scan still holds its Module (its pipeline, stages and buffers)")
	}
	runtime.KeepAlive(s)
}
