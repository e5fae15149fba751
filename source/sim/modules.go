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

// WriteFile simulates the scan cfg describes for the modules ids and
// writes it to a capture file at path, made by software: one module's
// frames as WriteCapture writes them, several modules' interleaved as
// WriteModules writes them (cfg.Module is ignored). A file at path is an
// error wrapping os.ErrExist unless overwrite. A capture cut short by an
// error is removed, unless path is not a regular file (a device).
func WriteFile(path string, cfg Config, ids []uint16, overwrite bool, software string) (Stats, error) {
	if len(ids) == 0 {
		return Stats{}, errors.New("simulate: no module")
	}
	cfg.Module = ids[0]
	scan, err := New(cfg)
	if err != nil {
		return Stats{}, err
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if overwrite {
		flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	out, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return Stats{}, fmt.Errorf("simulate: %w", err)
	}
	meta, err := Metadata(cfg, ids, time.Now(), software)
	var st Stats
	switch {
	case err != nil:
	case len(ids) == 1:
		st, err = scan.WriteCapture(out, meta)
	default:
		st, err = WriteModules(out, meta, cfg, ids)
	}
	info, _ := out.Stat()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if info != nil && info.Mode().IsRegular() {
			os.Remove(path) // a capture cut short is no use
		}
		return st, fmt.Errorf("simulate %s: %w", path, err)
	}
	return st, nil
}
