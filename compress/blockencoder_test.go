package compress

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// TestAppendBlocks checks that a chunk's header and its blocks encoded in
// runs apart, each run in its own part of a buffer of the chunk's bound,
// put together in order are Encode's very bytes: for both bitshuffle
// codecs, element sizes, block sizes, chunks that end in a partial block
// and leftover bytes, and runs of one to several blocks.
func TestAppendBlocks(t *testing.T) {
	for _, name := range Names() {
		_, ok := mustNew(t, name, 4).(BlockEncoder)
		if want := strings.HasPrefix(name, "bs"); ok != want {
			t.Errorf("%s: implements BlockEncoder: %v, want %v", name, ok, want)
		}
	}
	for _, codec := range []string{"bslz4", "bszstd"} {
		for _, es := range []int{1, 2, 4, 8} {
			for _, block := range []int{0, 64} {
				for _, n := range []int{0, 7, 8, 2048 * 4, 5000, 5005, 40_000 + 3} {
					for _, run := range []int{1, 3, 1000} {
						name := fmt.Sprintf("%s/uint%d/block %d/%d elements/runs of %d blocks", codec, 8*es, block, n, run)
						t.Run(name, func(t *testing.T) {
							c := newBlockEncoder(t, codec, es, block)
							src := lowCounts(n, es, uint64(n+es+block))
							want, err := c.Encode(nil, src)
							if err != nil {
								t.Fatal(err)
							}
							got := encodeInRuns(t, c, src, run*c.BlockElems()*es)
							if !bytes.Equal(got, want) {
								t.Errorf("blocks in runs give %d bytes, Encode %d: they differ", len(got), len(want))
							}
						})
					}
				}
			}
		}
	}
}

// newBlockEncoder returns the named bitshuffle codec with block elements
// a block (0: the default).
func newBlockEncoder(t testing.TB, name string, es, block int) BlockEncoder {
	t.Helper()
	c := mustNew(t, name, es)
	if block != 0 {
		fs := c.Filters()
		fs[0].Values[3] = uint32(block)
		var err error
		if c, err = FromFilters(fs, es); err != nil {
			t.Fatal(err)
		}
	}
	return c.(BlockEncoder)
}

// encodeInRuns encodes src as a decode backend does: runs of step bytes,
// each into its own part of one buffer of the chunk's bound (from the
// Bound of the bytes before it), then moved together.
func encodeInRuns(t *testing.T, c BlockEncoder, src []byte, step int) []byte {
	t.Helper()
	buf := make([]byte, c.Bound(len(src)))
	type part struct{ off, n int }
	var parts []part
	for start := 0; start == 0 || start < len(src); start += step {
		end := min(start+step, len(src))
		off := 0
		if start > 0 {
			off = c.Bound(start)
		}
		dst := buf[off:off:c.Bound(end)]
		if start == 0 {
			dst = c.AppendHeader(dst, len(src))
		}
		out, err := c.AppendBlocks(dst, src[start:end])
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > 0 && unsafe.SliceData(out) != unsafe.SliceData(dst) {
			t.Fatalf("bytes %d to %d: appended %d bytes outside the room their Bound gives", start, end, len(out))
		}
		parts = append(parts, part{off, len(out)})
	}
	at := 0
	for _, p := range parts {
		at += copy(buf[at:], buf[p.off:p.off+p.n])
	}
	return buf[:at]
}

// TestAppendBlocksErrors checks that a run of no whole number of elements
// is refused and leaves dst as it was.
func TestAppendBlocksErrors(t *testing.T) {
	c := newBlockEncoder(t, "bslz4", 4, 0)
	dst := []byte("keep")
	got, err := c.AppendBlocks(dst, make([]byte, 4097))
	if err == nil || !strings.Contains(err.Error(), "not a whole number of 4-byte elements") {
		t.Errorf("error %v, want one about whole elements", err)
	}
	if string(got) != "keep" {
		t.Errorf("dst became %q", got)
	}
}

func TestAppendBlocksZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	c := newBlockEncoder(t, "bslz4", 4, 0)
	src := lowCounts(100_000+5, 4, 5)
	enc := make([]byte, 0, c.Bound(len(src)))
	if allocs := testing.AllocsPerRun(5, func() { c.AppendBlocks(c.AppendHeader(enc, len(src)), src) }); allocs != 0 {
		t.Errorf("%v allocations per AppendBlocks, want 0", allocs)
	}
}
