// Package doctest finds the runnable shell examples of Markdown documents,
// so that a test runs them and an example that breaks fails it.
//
// A fenced code block is runnable where the line before its opening fence
// is a marker, an HTML comment that renderers do not show:
//
//	<!-- doctest -->
//
// A marker may carry settings, one "key: value" a line:
//
//	<!-- doctest
//	background: h5ingest acquire --provider tcp --listen 127.0.0.1:7100 -o received.h5
//	-->
//
// The keys are:
//
//   - before: a shell command the runner runs, and that must succeed,
//     before the block (to make the file an example reads); repeatable.
//   - background: a shell command the runner starts before the block and
//     waits for after it (a receiver for a send of the block); repeatable.
//
// The block's language is the first word of its fence's info string:
// none, sh, bash or shell for a shell script, python for Python.
//
// Blocks without a marker are not run: examples that need what a test
// machine lacks (an RDMA device, a beamline's paths) stay unmarked.
package doctest

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Block is a runnable code block of a document.
type Block struct {
	File string // the document's name, as given to Extract
	Line int    // line of the opening fence, from 1
	// Lang is the first word of the fence's info string: "", "sh",
	// "bash", "shell" or "python".
	Lang string
	// Text is the block's lines, without the fences.
	Text string
	// Before are the commands to run before the block, Background those
	// to run beside it.
	Before, Background []string
}

// languages are the languages of runnable blocks.
var languages = []string{"", "sh", "bash", "shell", "python"}

// String names the block as file:line.
func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

const (
	markerOpen  = "<!-- doctest"
	markerClose = "-->"
)

// Extract returns the runnable blocks of doc, the Markdown document name.
// A marker that no fenced block follows, a marker's unknown key and a
// block that does not end are errors.
func Extract(name string, doc []byte) ([]Block, error) {
	var blocks []Block
	var pending *Block // a marker's block, waiting for its fence
	var fence string   // the open fence; "" outside a block
	var text strings.Builder
	var current *Block // the runnable block being read, nil for others
	inMarker := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				if current != nil {
					current.Text = text.String()
					blocks = append(blocks, *current)
				}
				fence, current = "", nil
				text.Reset()
				continue
			}
			if current != nil {
				text.WriteString(line)
				text.WriteByte('\n')
			}
		case inMarker:
			if trimmed == markerClose {
				inMarker = false
				continue
			}
			if err := pending.set(trimmed); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, n, err)
			}
		case strings.HasPrefix(trimmed, markerOpen):
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: doctest marker without a code block after it", name, pending.Line)
			}
			pending = &Block{File: name, Line: n}
			rest := strings.TrimSpace(strings.TrimPrefix(trimmed, markerOpen))
			if r, ok := strings.CutSuffix(rest, markerClose); ok {
				if err := pending.set(strings.TrimSpace(r)); err != nil {
					return nil, fmt.Errorf("%s:%d: %w", name, n, err)
				}
			} else {
				inMarker = true
				if err := pending.set(rest); err != nil {
					return nil, fmt.Errorf("%s:%d: %w", name, n, err)
				}
			}
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			for len(fence) < len(trimmed) && trimmed[len(fence)] == fence[0] {
				fence += fence[:1]
			}
			if pending != nil {
				current, pending = pending, nil
				current.Line = n
				current.Lang, _, _ = strings.Cut(strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])), " ")
				if !slices.Contains(languages, current.Lang) {
					return nil, fmt.Errorf("%s:%d: doctest block of language %q: runnable blocks are shell or python", name, n, current.Lang)
				}
			}
		case pending != nil && trimmed != "":
			return nil, fmt.Errorf("%s:%d: doctest marker without a code block after it", name, pending.Line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case inMarker:
		return nil, fmt.Errorf("%s:%d: doctest marker does not end (%s)", name, pending.Line, markerClose)
	case fence != "":
		return nil, fmt.Errorf("%s: code block does not end (%s)", name, fence)
	case pending != nil:
		return nil, fmt.Errorf("%s:%d: doctest marker without a code block after it", name, pending.Line)
	}
	return blocks, nil
}

// set applies one line of a marker's settings to b.
func (b *Block) set(line string) error {
	if line == "" {
		return nil
	}
	key, value, ok := strings.Cut(line, ":")
	value = strings.TrimSpace(value)
	switch {
	case !ok:
		return fmt.Errorf("doctest setting %q: want key: value", line)
	case key == "before" && value != "":
		b.Before = append(b.Before, value)
	case key == "background" && value != "":
		b.Background = append(b.Background, value)
	default:
		return fmt.Errorf("doctest setting %q: the keys are before and background", line)
	}
	return nil
}
