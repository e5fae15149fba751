package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAcquireOverRoCESaysWhatItNeeds checks what acquire --transport roce
// says before any front end comes: the line it waits with names no
// libfabric provider (it said "(provider tcp)", which a roce receiver
// does not use), and without --rdma-params it is refused at once, since
// nothing would tell the front end the ring's address and rkey, which
// change each run: it waited the whole connect timeout for a write that
// could never come.
func TestAcquireOverRoCESaysWhatItNeeds(t *testing.T) {
	smallDetector(t)
	meet := t.TempDir()
	fe := filepath.Join(meet, "front-end.json")
	t.Run("waiting line", func(t *testing.T) {
		a := startProcEnv(t, roceEnv(t, meet), "acquire", "--transport", "roce", "--rdma-params", filepath.Join(meet, "rdma.json"),
			"--front-end", fe, "-o", filepath.Join(t.TempDir(), "w.h5"), "--connect-timeout", "100ms", "--projections", "4")
		a.wait(t, time.Minute)
		if msg := a.stderr.String(); !strings.Contains(msg, "waiting for module 0") || strings.Contains(msg, "provider") {
			t.Errorf("the waiting line names a libfabric provider, or is missing:\n%s", msg)
		}
	})
	t.Run("no parameter file", func(t *testing.T) {
		a := startProcEnv(t, roceEnv(t, meet), "acquire", "--transport", "roce", "--front-end", fe,
			"-o", filepath.Join(t.TempDir(), "n.h5"), "--connect-timeout", "2s", "--projections", "4")
		if code := a.wait(t, time.Minute); code != exitUsage || !strings.Contains(a.stderr.String(), "--rdma-params") {
			t.Errorf("exit status %d, want %d naming --rdma-params:\n%s", code, exitUsage, a.stderr.String())
		}
	})
}
