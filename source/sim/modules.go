package sim

import (
	"errors"
	"fmt"
	"h5ingest/source/capture"
	"h5ingest/version"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Metadata returns the metadata of a simulated capture of the modules
// ids, made at start by software: the program and its version, the
// geometry and, for a tomography scan, the plan.
func Metadata(cfg Config, ids []uint16, start time.Time, software string) (capture.Metadata, error) {
	meta := capture.Metadata{
		Profile:  "simulated",
		Created:  start.UTC().Format(time.RFC3339),
		Software: software,
	}
	geometry := capture.Geometry{Format: capture.NewFormatInfo(cfg.Format), Orientation: cfg.Orientation}
	for _, id := range ids {
		geometry.Modules = append(geometry.Modules, capture.Module{ID: int(id)})
	}
	if err := meta.SetFields(capture.KeyVersion, version.String(), capture.KeyGeometry, geometry); err != nil {
		return meta, err
	}
	if cfg.Scene == Tomo {
		if err := meta.Set(capture.KeyPlan, cfg.Plan); err != nil {
			return meta, err
		}
	}
	return meta, nil
}

// WriteModules simulates the modules ids (module K's images from seed +
// K) and writes their frames to out interleaved, a record of each module
// in turn, with every module's ground truth under ModulesKey. Each
// module is simulated into a temporary capture beside out first, so that
// memory stays that of one frame per module.
func WriteModules(out *os.File, meta capture.Metadata, cfg Config, ids []uint16) (Stats, error) {
	var total Stats
	var truths []*Truth
	var readers []*capture.Reader
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	for _, id := range ids {
		c := cfg
		c.Module, c.Seed = id, cfg.Seed+uint64(id)
		scan, err := New(c)
		if err != nil {
			return total, err
		}
		tmp, err := os.CreateTemp(filepath.Dir(out.Name()), "."+filepath.Base(out.Name())+".module-*")
		if err != nil {
			return total, err
		}
		defer os.Remove(tmp.Name())
		st, err := scan.WriteCapture(tmp, capture.Metadata{Profile: meta.Profile, Created: meta.Created, Software: meta.Software})
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return total, fmt.Errorf("module %d: %w", id, err)
		}
		r, err := capture.Open(tmp.Name())
		if err != nil {
			return total, fmt.Errorf("module %d: %w", id, err)
		}
		readers = append(readers, r)
		truth, err := ReadTruth(r.Metadata())
		if err != nil {
			return total, err
		}
		truths = append(truths, truth)
		total.Frames += st.Frames
		total.Records += st.Records
		total.Overflow += st.Overflow
	}
	if err := meta.Set(ModulesKey, truths); err != nil {
		return total, err
	}
	w, err := capture.NewWriter(out, meta)
	if err != nil {
		return total, err
	}
	buf := make([]byte, cfg.Format.PayloadSize())
	for live := len(readers); live > 0; {
		live = 0
		for _, r := range readers {
			h, payload, err := r.Next(buf)
			if errors.Is(err, io.EOF) {
				continue
			}
			if err != nil {
				return total, err
			}
			live++
			if err := w.WriteFrame(&h, payload); err != nil {
				return total, err
			}
		}
	}
	err = w.Close()
	total.Bytes = w.Size()
	return total, err
}
