package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProfilesCheckRoCEKeys checks that profiles check names each bad
// roce key, as acquire does when the scan starts: it said "ok" for every
// one of them, so an operator learnt of the mistake only at the beamline.
func TestProfilesCheckRoCEKeys(t *testing.T) {
	for _, tc := range []struct{ name, source, want string }{
		{"queue pair type", "qp_type: xx", "source.qp_type"},
		{"mtu", "mtu: 1000", "source.mtu"},
		{"immediate", "immediate: word", "source.immediate"},
		{"frame header", "frame_header: maybe", "source.frame_header"},
		{"ring not deeper than the guard", "ring_slots: 5", "source.ring_slots"},
		{"uc without headers", "qp_type: uc\n  frame_header: none", "source.qp_type"},
		{"front end QPN 0", "front_end:\n    - {module: 0, gid: 'fe80::1', qpn: 0, psn: 1}", "source.front_end"},
		{"front end GID garbage", "front_end:\n    - {module: 0, gid: 'garbage', qpn: 5, psn: 1}", "source.front_end"},
		{"front end of no module of the detector", "front_end:\n    - {module: 7, gid: 'fe80::1', qpn: 5, psn: 1}", "source.front_end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "roce.yaml")
			text := "name: roce\nsource:\n  transport: roce\n  " + tc.source + "\n"
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out := runCaptured(t, "profiles", "check", path)
			if code != exitUsage || !strings.Contains(out, tc.want) {
				t.Errorf("profiles check: exit status %d, want %d naming %s:\n%s", code, exitUsage, tc.want, out)
			}
		})
	}
}

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
