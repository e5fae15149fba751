package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/tools/doctest"
)

// docFiles are the documents whose examples TestDocs runs, from the
// repository's root.
var docFiles = []string{"README.md", "docs/*.md"}

// docBlockTimeout bounds one block of a document, and docBackgroundLinger
// how long its background commands may run on after it.
const (
	docBlockTimeout     = 5 * time.Minute
	docBackgroundLinger = time.Minute
)

// TestDocs runs the runnable examples of the README and docs/*.md (code
// blocks marked as package tools/doctest says) as a user would, with this
// test binary as h5ingest on the PATH, each block in a directory of its
// own: an example that breaks fails the test. Loopback addresses the
// examples name (127.0.0.1:PORT) are given free ports in their place, so
// that runs beside each other do not collide, and the repository's
// scripts they name from its root (tools/serve/client.py) their absolute
// paths.
func TestDocs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the documents' examples run scans of full-size detectors")
	}
	bin := h5ingestOnPath(t)
	var blocks []doctest.Block
	for _, pattern := range docFiles {
		names, err := filepath.Glob(filepath.Join("..", pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			doc, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(filepath.Join(".."), name)
			b, err := doctest.Extract(rel, doc)
			if err != nil {
				t.Fatal(err)
			}
			blocks = append(blocks, b...)
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no runnable example in the README or docs/")
	}
	// Each block runs in a directory of its own on ports of its own, so
	// that the blocks run beside each other (go test's -parallel at a
	// time): most of their time is a scan's waits.
	for _, b := range blocks {
		t.Run(b.String(), func(t *testing.T) {
			t.Parallel()
			runDocBlock(t, bin, b)
		})
	}
}

// h5ingestOnPath writes a directory holding an h5ingest that runs this
// test binary as the command, and returns it.
func h5ingestOnPath(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nH5INGEST_TEST_AS_COMMAND=1 exec %q \"$@\"\n", self)
	if err := os.WriteFile(filepath.Join(dir, "h5ingest"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loopbackAddr is a loopback address of an example.
var loopbackAddr = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// repoScript is a script of the repository's tools/ as an example names it,
// from the repository's root.
var repoScript = regexp.MustCompile(`\btools/[A-Za-z0-9_./-]+\.(?:py|sh)\b`)

// fromRoot returns text with the repository's scripts it names given by
// their absolute paths, so that an example written to be run from the
// repository's root runs in a directory of its own.
func fromRoot(t *testing.T, text string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join(".."))
	if err != nil {
		t.Fatal(err)
	}
	return repoScript.ReplaceAllStringFunc(text, func(path string) string {
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			return path
		}
		return filepath.Join(root, path)
	})
}

// runDocBlock runs block b (under bash -e, or Python) in a directory of
// its own, after its commands before and with its background commands
// beside it, and fails the test where any of them fails, the block
// outlasts docBlockTimeout, or a background command outlasts the block
// by docBackgroundLinger.
func runDocBlock(t *testing.T, bin string, b doctest.Block) {
	dir := t.TempDir()
	ports := map[string]string{}
	free := func(addr string) string {
		if _, ok := ports[addr]; !ok {
			ports[addr] = scantest.FreeAddr(t)
		}
		return ports[addr]
	}
	ctx, cancel := context.WithTimeout(context.Background(), docBlockTimeout)
	defer cancel()
	bgCtx, bgCancel := context.WithCancel(ctx)
	defer bgCancel()
	shell := func(ctx context.Context, script string, out *bytes.Buffer) *exec.Cmd {
		return docCommand(ctx, dir, bin, out, "bash", "-e", "-o", "pipefail", "-c", loopbackAddr.ReplaceAllStringFunc(fromRoot(t, script), free))
	}
	for _, line := range b.Before {
		var out bytes.Buffer
		if err := shell(ctx, line, &out).Run(); err != nil {
			t.Fatalf("%s: its command before %q fails (%v):\n%s", b, line, err, tail(out.String()))
		}
	}
	type background struct {
		line string
		cmd  *exec.Cmd
		out  bytes.Buffer
	}
	bgs := make([]*background, len(b.Background))
	for i, line := range b.Background {
		bg := &background{line: line}
		bg.cmd = shell(bgCtx, line, &bg.out)
		if err := bg.cmd.Start(); err != nil {
			t.Fatalf("%s: background %q: %v", b, line, err)
		}
		bgs[i] = bg
	}
	var out bytes.Buffer
	example := shell(ctx, b.Text, &out)
	if b.Lang == "python" {
		example = docCommand(ctx, dir, bin, &out, docPython, "-c", loopbackAddr.ReplaceAllStringFunc(fromRoot(t, b.Text), free))
	}
	err := example.Run()
	endGroup(example)
	if err != nil {
		t.Errorf("%s: the example fails (%v):\n%s\n%s", b, err, b.Text, tail(out.String()))
	}
	linger := time.AfterFunc(docBackgroundLinger, bgCancel)
	defer linger.Stop()
	for _, bg := range bgs {
		err := bg.cmd.Wait()
		endGroup(bg.cmd)
		if err != nil {
			t.Errorf("%s: its background command %q fails (%v):\n%s", b, bg.line, err, tail(bg.out.String()))
		}
	}
	if t.Failed() {
		t.Logf("ports in place of the example's: %v", ports)
	}
}

// docPython runs the documents' Python examples: the Python with the
// Debian packages the documents use (h5py, hdf5plugin, dxchange).
const docPython = "/usr/bin/python3"

// docCommand returns the command name args of a document's example, run
// in dir with bin first on the PATH, its output to out, in a process group
// of its own: the processes an example starts in the background (a serve)
// are killed with it when ctx ends, and by endGroup.
func docCommand(ctx context.Context, dir, bin string, out *bytes.Buffer, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return endGroup(cmd) }
	cmd.WaitDelay = time.Second
	return cmd
}

// endGroup kills what is left of the process group of cmd, which
// docCommand started: the background processes of an example that failed
// before it stopped them, so that none holds its ports after the test.
func endGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// tail returns the end of a command's output, enough to see why it failed.
func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
