// Package deploy holds what a detector node needs to run h5ingest serve
// as a system service: its systemd unit, its user and its settings file,
// which make install lays out as docs/deploying.md says. Its tests check
// the unit with systemd-analyze and the layout against the doc.
package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/cli"
	"h5ingest/serve"
)

// verify runs systemd-analyze verify on unit and returns what it said;
// it reports a unit it finds fault with (a misspelt key, a command that
// is not there) on its output, not always in its exit status.
func verify(t *testing.T, unit string, args ...string) string {
	t.Helper()
	cmd := exec.Command("systemd-analyze", append(append([]string{"verify", "--man=no"}, args...), unit)...)
	cmd.Dir = filepath.Dir(unit)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out) + "\n" + err.Error())
	}
	return strings.TrimSpace(string(out))
}

// needAnalyze skips t where systemd-analyze is missing.
func needAnalyze(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not found (Debian package systemd): the unit cannot be verified here")
	}
}

// withCommand writes the unit, its ExecStart's program replaced by an
// executable of the test's, into a temporary directory, and returns its
// path: systemd-analyze checks that the program exists.
func withCommand(t *testing.T, unit string) string {
	t.Helper()
	dir := t.TempDir()
	prog := filepath.Join(dir, "h5ingest")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "h5ingest-serve.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/h5ingest", prog)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUnitVerifies checks the serve unit with systemd-analyze verify (and
// that the check catches a misspelt key and a missing program), and that
// it holds what a node needs: a user of its own, no limit on locked
// memory, the data root, the token, the compute cache, a restart on
// failure, and no PrivateDevices (which hides the NIC and the GPU).
func TestUnitVerifies(t *testing.T) {
	b, err := os.ReadFile("h5ingest-serve.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"\nUser=h5ingest\n", "\nLimitMEMLOCK=infinity\n", "\nRestart=on-failure\n", "\nLoadCredential=token:/etc/h5ingest/token\n",
		"--data-root ${DATA_ROOT}", "--token-file %d/token", "--cuda-cache %C/h5ingest/cuda", "\nCacheDirectory=h5ingest\n",
		"\nNoNewPrivileges=yes\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?m)^PrivateDevices=(yes|true|1)`).MatchString(unit) {
		t.Error("the unit sets PrivateDevices, which hides /dev/infiniband and /dev/nvidia*")
	}

	needAnalyze(t)
	if out := verify(t, withCommand(t, unit)); out != "" {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
	for name, bad := range map[string]string{
		"misspelt key":    strings.Replace(unit, "LimitMEMLOCK=", "LimitMEMLOK=", 1),
		"missing program": strings.Replace(unit, "/usr/local/bin/h5ingest", "/nonexistent/h5ingest", 1),
	} {
		path := filepath.Join(t.TempDir(), "h5ingest-serve.service")
		if name == "misspelt key" {
			path = withCommand(t, bad)
		} else if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := verify(t, path); out == "" {
			t.Errorf("%s: systemd-analyze verify said nothing", name)
		}
	}
}

// docLayout returns the paths docs/deploying.md says make install lays
// out: the code block after its "install layout" comment.
func docLayout(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../docs/deploying.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var paths []string
	state := 0 // 0: before the comment, 1: before the block, 2: in it
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		switch {
		case state == 0 && strings.Contains(line, "install layout"):
			state = 1
		case state == 1 && line == "```":
			state = 2
		case state == 2 && line == "```":
			return paths
		case state == 2 && line != "":
			paths = append(paths, line)
		}
	}
	t.Fatal("docs/deploying.md has no install layout block")
	return nil
}

// TestMakeInstall runs make install with DESTDIR and a PREFIX of its own
// and checks that it lays out what docs/deploying.md says, nothing more:
// the unit runs the installed command, passes systemd-analyze verify with
// the tree as its root, and gives serve only flags it has.
func TestMakeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not found")
	}
	const prefix = "/opt/h5ingest"
	dest := t.TempDir()
	bin := filepath.Join(t.TempDir(), "h5ingest")
	cmd := exec.Command("make", "-C", "..", "install", "DESTDIR="+dest, "PREFIX="+prefix, "BIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	var installed []string
	filepath.WalkDir(dest, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			installed = append(installed, strings.TrimPrefix(path, dest))
		}
		return err
	})
	covered := map[string]bool{}
	for _, p := range docLayout(t) {
		pattern := strings.NewReplacer("PREFIX", prefix, "SYSCONFDIR", "/etc").Replace(p)
		matches, err := filepath.Glob(dest + pattern)
		if err != nil || len(matches) == 0 {
			t.Errorf("docs/deploying.md lists %s, which make install did not lay out", pattern)
		}
		for _, m := range matches {
			covered[strings.TrimPrefix(m, dest)] = true
		}
	}
	for _, p := range installed {
		if !covered[p] {
			t.Errorf("make install laid out %s, which docs/deploying.md does not list", p)
		}
	}
	if !slices.Contains(installed, prefix+"/share/doc/h5ingest/deploying.md") {
		t.Error("this page is not installed with the documentation")
	}

	unit := dest + prefix + "/lib/systemd/system/h5ingest-serve.service"
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	start := regexp.MustCompile(`(?m)^ExecStart=(\S+) serve (.*)$`).FindStringSubmatch(string(b))
	if start == nil || start[1] != prefix+"/bin/h5ingest" {
		t.Fatalf("installed unit's ExecStart: %q, want %s/bin/h5ingest serve ...", start, prefix)
	}
	help, err := exec.Command(dest+start[1], "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s serve --help: %v\n%s", start[1], err, help)
	}
	for _, flag := range regexp.MustCompile(`--[a-z-]+`).FindAllString(start[2], -1) {
		if !strings.Contains(string(help), "  "+flag+" ") {
			t.Errorf("the unit passes %s, which serve does not have", flag)
		}
	}
	if _, err := os.Stat(dest + "/etc/sysusers.d/h5ingest.conf"); err != nil {
		t.Error(err)
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		// The installed command, where DESTDIR put it.
		copy := filepath.Join(t.TempDir(), "h5ingest-serve.service")
		if err := os.WriteFile(copy, []byte(strings.Replace(string(b), "ExecStart="+start[1], "ExecStart="+dest+start[1], 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := verify(t, copy); out != "" {
			t.Errorf("systemd-analyze verify of the installed unit:\n%s", out)
		}
	}
}

// TestUnitOutlastsTheDrain: systemd waits for serve's drain on stop
// (TimeoutStopSec beyond --drain-timeout, the cancel's write and the
// server's shutdown) rather than kill it mid-scan.
func TestUnitOutlastsTheDrain(t *testing.T) {
	b, err := os.ReadFile("h5ingest-serve.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)s$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the unit sets no TimeoutStopSec in seconds")
	}
	if start := regexp.MustCompile(`(?m)^ExecStart=.*$`).Find(b); bytes.Contains(start, []byte("--drain-timeout")) {
		t.Fatal("the unit's serve has its own --drain-timeout: check TimeoutStopSec against it")
	}
	stop, _ := time.ParseDuration(string(m[1]) + "s")
	const shutdown = 5 * time.Second // service.Serve's for its HTTP server
	if need := cli.DrainTimeout + serve.CancelWrite + shutdown; stop <= need {
		t.Errorf("TimeoutStopSec=%v, want more than the drain (%v), the cancel's write (%v) and the shutdown (%v)", stop, cli.DrainTimeout, serve.CancelWrite, shutdown)
	}
}
