package cli

import (
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"h5ingest/scan/scantest"
)

// fileAccess returns the permission bits and group of the file at path.
func fileAccess(t *testing.T, path string) (os.FileMode, int) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm(), int(info.Sys().(*syscall.Stat_t).Gid)
}

// accessGroup returns a group id, other than the process's, that the
// process may give its files; it skips the test where there is none.
func accessGroup(t *testing.T) int {
	t.Helper()
	groups, _ := os.Getgroups()
	if os.Geteuid() == 0 { // root gives a file any group this host has
		for _, name := range []string{"users", "adm", "daemon", "nogroup"} {
			if g, err := user.LookupGroup(name); err == nil {
				id, _ := strconv.Atoi(g.Gid)
				groups = append(groups, id)
			}
		}
	}
	for _, g := range groups {
		if g != os.Getegid() {
			return g
		}
	}
	t.Skip("the process belongs to no group but its own")
	return -1
}

// TestFileAccessOperatorOnly checks that the scan's files get the mode
// and group the operator set: in a profile of serve's, and with replay's
// flags; and that a request that tries to set either is refused.
func TestFileAccessOperatorOnly(t *testing.T) {
	smallDetector(t)
	gid := accessGroup(t)
	capPath, _ := simulate(t, "--frames", "6")

	t.Run("replay", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "r.h5")
		if code := run([]string{"replay", capPath, "-o", out, "--file-mode", "0604", "--file-group", strconv.Itoa(gid)}); code != exitOK {
			t.Fatalf("replay: exit status %d", code)
		}
		if mode, g := fileAccess(t, out); mode != 0o604 || g != gid {
			t.Errorf("replay's file: mode %v, group %d; want 0604, %d", mode, g, gid)
		}
	})

	t.Run("serve", func(t *testing.T) {
		dir, profiles := t.TempDir(), t.TempDir()
		port := scantest.FreePort(t)
		text := fmt.Sprintf("name: beamline\nsource:\n  port: %d\n  connect_timeout: 30s\noutput:\n  directory: %s\n  file_mode: 0640\n  file_group: %q\n", port, dir, strconv.Itoa(gid))
		if err := os.WriteFile(filepath.Join(profiles, "beamline.yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		p := startServe(t, "0123456789abcdef", "--profiles", profiles)
		for _, key := range []string{"file_mode", "file_group"} {
			body := map[string]any{"profile": "beamline", "scan_id": "x-" + key, "overrides": map[string]any{"output": map[string]any{key: "0666"}}}
			if code, e := p.call("POST", "/v1/scans", body); code != http.StatusUnprocessableEntity {
				t.Errorf("a request setting output.%s: %d %v, want %d", key, code, e, http.StatusUnprocessableEntity)
			}
		}
		if code, e := p.call("POST", "/v1/scans", map[string]any{"profile": "beamline", "scan_id": "a1", "plan": map[string]any{"projections": 6}}); code != http.StatusCreated {
			t.Fatalf("arm: %d %v\n%s", code, e, p.out.String())
		}
		if code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"}); code != exitOK {
			t.Fatalf("send: exit status %d\n%s", code, p.out.String())
		}
		if _, st := p.call("GET", "/v1/scans/a1/wait?timeout=60", nil); st["state"] != "done" {
			t.Fatalf("scan a1: %v\n%s", st, p.out.String())
		}
		if mode, g := fileAccess(t, filepath.Join(dir, "a1.h5")); mode != 0o640 || g != gid {
			t.Errorf("serve's file: mode %v, group %d; want 0640, %d", mode, g, gid)
		}
	})
}
