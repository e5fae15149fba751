package serve

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"weak"

	"go.uber.org/zap"

	"h5ingest/scan"
	"h5ingest/scan/scantest"
	"h5ingest/service"
)

// moduleCatcher is a service.Reporter that notes, weakly, the Module of
// the scan it reports for while the scan still shows it.
type moduleCatcher struct {
	s      *serveScan
	module weak.Pointer[scan.Module]
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

// TestServeScanEndedKeepsNoModule runs scans as the service runs them
// (Prepare, Run), of one module and of a node of two, and checks that
// once Run has returned, the scan, which the service keeps for its status
// (the last 16 of them), holds on to nothing of its Modules: their
// pipelines, stages and buffers are collected.
func TestServeScanEndedKeepsNoModule(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		name string
		// arm returns a Runner's scan of n frames and starts its senders,
		// whose errors come on the channels.
		arm func(t *testing.T) (service.Scan, []<-chan error)
	}{
		{"one module", func(t *testing.T) (service.Scan, []<-chan error) {
			dir, addr := t.TempDir(), scantest.FreeAddr(t)
			r := &Runner{Profiles: profileFiles(t, "served", serveProfile(scantest.BigFormat, addr, dir, 16, "deflate", 1)), Log: zap.NewNop(), Stages: scantest.Stages(t)}
			sc, err := r.Prepare(context.Background(), service.ArmRequest{Profile: "served", ScanID: "one", Plan: &service.Plan{Projections: n}})
			if err != nil {
				t.Fatal(err)
			}
			return sc, []<-chan error{scantest.Send(scantest.SimulateModule(t, scantest.BigFormat, n, 0), addr, 0, nil)}
		}},
		{"a node of two modules", func(t *testing.T) (service.Scan, []<-chan error) {
			port, ids := scantest.FreePorts(t, 2), []int{0, 1}
			r := &Runner{Profiles: profileFiles(t, "pair", arrayProfileText(ids, port, t.TempDir(), 30*time.Second)), ModuleIDs: ids,
				Log: zap.NewNop(), Stages: scantest.Stages(t)}
			sc, err := r.Prepare(context.Background(), service.ArmRequest{Profile: "pair", ScanID: "pair", Plan: &service.Plan{Projections: n}})
			if err != nil {
				t.Fatal(err)
			}
			return sc, []<-chan error{sendPaced(scantest.SimulateModule(t, scantest.SmallFormat, n, 0), port, 0, 0), sendPaced(scantest.SimulateModule(t, scantest.SmallFormat, n, 1), port+1, 1, 0)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, sent := tc.arm(t)
			var s *serveScan
			switch sc := sc.(type) {
			case *serveScan:
				s = sc
			case *nodeScan:
				s = sc.serveScan
			default:
				t.Fatalf("a scan of %T", sc)
			}
			c := &moduleCatcher{s: s}
			res := sc.Run(context.Background(), c)
			for _, ch := range sent {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			if res.State != service.Done || res.Counts.OK != res.Counts.Planned || res.Counts.OK < n {
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
			runtime.KeepAlive(sc)
		})
	}
}

// profileFiles returns a directory holding the profile file name with
// text.
func profileFiles(t *testing.T, name, text string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
