package extend_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"example.org/beamline/extend"

	"h5ingest/compress"
	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/source/capture"
	"h5ingest/source/sim"
	"h5ingest/stock"
	"h5ingest/writer"
)

// threshold is the noise threshold the profile sets, in counts.
const threshold = 1500

// profile chooses the stages of package extend by name, and sets the
// threshold processor's option.
const profile = `description: a beamline that thresholds its frames
backend: cpu
output:
  layout: flat
  compression: deflate-max
  processors: [{name: threshold, min: 1500}]
`

// Example registers the stages of package extend beside h5ingest's own,
// chooses them by name in a profile file, replays a simulated scan with
// them and verifies the file it wrote.
func Example() {
	dir, err := os.MkdirTemp("", "extend")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// One registry: h5ingest's stages, then the facility's.
	stages := registry.New()
	if err := stock.Register(stages); err != nil {
		panic(err)
	}
	if err := extend.Register(stages); err != nil {
		panic(err)
	}

	// The profile names them; loading it checks the names against the
	// registry, and the threshold's option against its options.
	path := filepath.Join(dir, "beamline.yaml")
	if err := os.WriteFile(path, []byte(profile), 0o644); err != nil {
		panic(err)
	}
	p, err := config.Load(path, stages.Names())
	if err != nil {
		panic(err)
	}

	// A scan to replay: 12 simulated frames, as a detector sends them.
	captured := filepath.Join(dir, "scan.pmcap")
	if err := simulate(captured, plan.Tomo(2, 2, 8, 0, 180)); err != nil {
		panic(err)
	}
	out := filepath.Join(dir, "scan.h5")
	files, err := scan.NewFiles(p, scan.Names{Output: out})
	if err != nil {
		panic(err)
	}
	_, err = scan.Replay(context.Background(), scan.ReplayOptions{
		Options:  scan.Options{Profile: p, Stages: stages},
		Files:    files,
		Captures: []string{captured},
	})
	if err != nil {
		panic(err)
	}

	// The file: the flat layout, the processed images, proven by verify.
	r, err := writer.OpenPlain(out)
	if err != nil {
		panic(err)
	}
	fmt.Printf("layout %s, %d frames, filters %s\n", r.Layout, r.Frames, compress.FilterName(r.Filters[len(r.Filters)-1].ID))
	fmt.Println("pixels below the threshold left:", below(r, threshold))
	r.Close()
	_, err = scan.Verify(context.Background(), stages, out, time.Minute)
	fmt.Println("verify:", err)
	// Output:
	// layout other, 12 frames, filters deflate
	// pixels below the threshold left: 0
	// verify: <nil>
}

// simulate writes a capture of the simulator's tomography scene with pl.
func simulate(path string, pl plan.Plan) error {
	cfg := sim.DefaultConfig()
	cfg.Format.Geometry = frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16}
	cfg.Plan = pl
	s, err := sim.New(cfg)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = s.WriteCapture(f, capture.Metadata{Profile: "example"})
	return err
}

// below counts the pixels of the file's frames that are neither zero nor
// at least min counts.
func below(r *writer.Reader, min uint32) int {
	codec, err := compress.FromFilters(r.Filters, r.ElemSize)
	if err != nil {
		panic(err)
	}
	n := 0
	var img []byte
	for i := range r.Frames {
		chunk, _, err := r.ReadChunk(i, nil)
		if err != nil {
			panic(err)
		}
		if img, err = codec.Decode(img[:0], chunk); err != nil {
			panic(err)
		}
		for j := 0; j+3 < len(img); j += 4 {
			if v := binary.LittleEndian.Uint32(img[j:]); v != 0 && v < min {
				n++
			}
		}
	}
	return n
}
