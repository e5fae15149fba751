package pipelinetest

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"h5ingest/frame"
	"h5ingest/pipeline"
)

// Stored is what a sink under test holds once the suite's calls are done:
// the chunk of each frame that has one, and each frame's record.
type Stored struct {
	Chunks  map[int][]byte
	Records map[int]frame.Record
}

// Sink checks a sink as the pipeline uses it: open returns a new sink
// for a scan of frames frames and a function that, called after the
// suite's last call, returns what the sink stored (reading a file back,
// for a file's sink). The suite stores chunks and records in an order
// that is not the frames' (compression workers finish out of order), and
// overwrites each chunk's bytes once WriteChunk has returned, as the
// pipeline reuses its buffers: the sink must keep every chunk as it was
// given, give each frame the record set for it, and store no chunk for a
// frame that is missing or rejected.
func Sink(t *testing.T, open func(t *testing.T, frames int) (s pipeline.Sink, stored func() Stored)) {
	t.Helper()
	const n = 12
	rng := rand.New(rand.NewPCG(3, 4))
	statuses := map[int]uint8{3: frame.StatusMissing, 7: frame.StatusRejected, 9: frame.StatusCRCMismatch}
	wantChunks, wantRecords := map[int][]byte{}, map[int]frame.Record{}
	sink, stored := open(t, n)
	buf := make([]byte, 0, 4096)
	for _, i := range rng.Perm(n) {
		rec := frame.Record{Timestamp: 1000 + uint64(i), RawCRC: rng.Uint32(), DataCRC: rng.Uint32(), Status: statuses[i]}
		if rec.Status == frame.StatusMissing {
			rec.Timestamp, rec.RawCRC, rec.DataCRC = 0, 0, 0
		}
		if frame.Written(rec.Status) {
			chunk := buf[:64+rng.IntN(4000)]
			for j := range chunk {
				chunk[j] = byte(rng.Uint32())
			}
			wantChunks[i] = bytes.Clone(chunk)
			if err := sink.WriteChunk(i, chunk); err != nil {
				t.Fatalf("WriteChunk(%d): %v", i, err)
			}
			for j := range chunk { // the pipeline's buffer, reused
				chunk[j] = 0xEE
			}
		}
		wantRecords[i] = rec
		if err := sink.SetRecord(i, rec); err != nil {
			t.Fatalf("SetRecord(%d): %v", i, err)
		}
	}
	got := stored()
	for i := range n {
		if want, ok := wantChunks[i]; ok && !bytes.Equal(got.Chunks[i], want) {
			t.Errorf("frame %d: stored chunk of %d bytes differs from the %d given", i, len(got.Chunks[i]), len(want))
		}
		if _, ok := wantChunks[i]; !ok && got.Chunks[i] != nil {
			t.Errorf("frame %d (%s): a chunk of %d bytes stored, want none", i, frame.StatusName(statuses[i]), len(got.Chunks[i]))
		}
		if got.Records[i] != wantRecords[i] {
			t.Errorf("frame %d: record %+v, want %+v", i, got.Records[i], wantRecords[i])
		}
	}
}
