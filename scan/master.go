package scan

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/writer"
)

// moduleFrames returns the master's frame count: the plan's, else the
// longest module file present. Module files present must have the
// profile's frame size.
func moduleFrames(files Files, format frame.Format, planned int) (int, error) {
	longest := 0
	for _, m := range files.Modules {
		if _, err := os.Stat(m.Path); errors.Is(err, os.ErrNotExist) {
			continue
		}
		r, err := writer.OpenPlain(m.Path)
		if err != nil {
			return 0, err
		}
		h, w, es, n := r.Height, r.Width, r.ElemSize, r.Frames
		r.Close()
		if h != format.Height() || w != format.Width() || es != format.PixelSize() {
			return 0, fmt.Errorf("module file %s holds %d x %d frames of %d bytes a pixel, the profile's detector %d x %d of %d",
				m.Path, h, w, es, format.Height(), format.Width(), format.PixelSize())
		}
		longest = max(longest, n)
	}
	if planned > 0 {
		return planned, nil
	}
	if longest == 0 {
		return 0, Usage(errors.New("no plan and no module file to take the scan's length from: give the plan (e.g. --projections N)"))
	}
	return longest, nil
}

// File is the file of one module of a scan.
type File struct {
	Module config.Module
	Path   string
}

// Files are the files of a scan: one per module, and the master file when
// the detector has several modules ("" otherwise).
type Files struct {
	Master  string
	Modules []File
}

// Names says what a scan's files are called: Output (-o) names the file
// of a one-module scan, or the master of several; without it the
// profile's output.template names them, with the scan's ScanID.
type Names struct {
	Output string
	ScanID string
	Now    time.Time // for {date}; zero means now
}

// moduleWord is the word of a file name template that names a module:
// {module} and the letters joined to it (m{module}, mod{module}_).
var moduleWord = regexp.MustCompile(`[A-Za-z]*\{module\}[A-Za-z]*`)

// MasterTemplate returns the template of a master file's name, from the
// template of its module files': each word holding {module} (the
// placeholder and the letters joined to it on either side) replaced by
// "master", so that {scan}_m{module}.h5 gives {scan}_master.h5 and
// m{module}_{scan}.h5 gives master_{scan}.h5.
func MasterTemplate(template string) string {
	return moduleWord.ReplaceAllLiteralString(template, "master")
}

// NewFiles returns the files of a scan of every module of the profile.
// With one module, the file is n.Output, or the profile's template. With
// several, Output NAME.h5 names the master and module K's file is
// NAME_m<K>.h5 beside it; without Output, the template names module K's
// file with {module} replaced by K and the master's as MasterTemplate
// says (a template without {module} names the master, and the module
// files take the _m<K> suffix as with Output).
func NewFiles(p config.Profile, n Names) (Files, error) {
	if n.Now.IsZero() {
		n.Now = time.Now()
	}
	mods := p.Detector.Modules
	if len(mods) == 1 {
		out, err := n.path(p, mods[0].ID)
		return Files{Modules: []File{{mods[0], out}}}, err
	}
	if n.Output == "" && n.ScanID == "" {
		return Files{}, Usage(errors.New("no output file: give -o MASTER.h5, or --scan-id ID for the profile's output.template"))
	}
	var files Files
	name := func(o config.Output, module int) (string, error) {
		path, err := o.FileName(n.ScanID, module, n.Now)
		if err != nil {
			return "", Usage(fmt.Errorf("--scan-id: %w", err))
		}
		return path, nil
	}
	var err error
	if n.Output == "" && strings.Contains(p.Output.Template, "{module}") {
		o := p.Output
		o.Template = MasterTemplate(o.Template)
		if files.Master, err = name(o, 0); err != nil {
			return Files{}, err
		}
		for _, m := range mods {
			path, err := name(p.Output, m.ID)
			if err != nil {
				return Files{}, err
			}
			files.Modules = append(files.Modules, File{m, path})
		}
		return files, nil
	}
	files.Master = n.Output
	if files.Master == "" {
		if files.Master, err = name(p.Output, 0); err != nil {
			return Files{}, err
		}
	}
	if !strings.HasSuffix(files.Master, ".h5") {
		return Files{}, Usage(fmt.Errorf("-o %s: the master file's name must end in .h5", files.Master))
	}
	stem := strings.TrimSuffix(files.Master, ".h5")
	for _, m := range mods {
		files.Modules = append(files.Modules, File{m, stem + "_m" + strconv.Itoa(m.ID) + ".h5"})
	}
	return files, nil
}

// path returns the file a scan of module writes: Output, or the profile's
// directory and template.
func (n Names) path(p config.Profile, module int) (string, error) {
	if n.Output != "" {
		return n.Output, nil
	}
	if n.ScanID == "" {
		return "", Usage(errors.New("no output file: give -o FILE.h5, or --scan-id ID for the profile's output.template"))
	}
	name, err := p.Output.FileName(n.ScanID, module, n.Now)
	if err != nil {
		return "", Usage(fmt.Errorf("--scan-id: %w", err))
	}
	return name, nil
}

// ArraySize returns the size of the array image: the bounding box of the
// profile's modules at their offsets, each of f's size.
func ArraySize(p config.Profile, f frame.Format) (height, width int) {
	for _, m := range p.Detector.Modules {
		height = max(height, m.Y+f.Height())
		width = max(width, m.X+f.Width())
	}
	return height, width
}

// existingMaster reads path where it is already the master file of files
// and frames (one written ahead by h5ingest master, or by the scan before
// its first frame): its metadata, and true. Other files give false.
func existingMaster(path, dir string, files Files, frames int) (writer.Metadata, bool) {
	r, err := writer.OpenPlain(path)
	if err != nil {
		return writer.Metadata{}, false
	}
	defer r.Close()
	if r.Frames != frames || len(r.Modules) != len(files.Modules) {
		return writer.Metadata{}, false
	}
	for i, m := range r.Modules {
		if m.ID != files.Modules[i].Module.ID || filepath.Join(dir, m.File) != filepath.Clean(files.Modules[i].Path) {
			return writer.Metadata{}, false
		}
	}
	md, err := r.Metadata()
	return md, err == nil
}

// ScanMetadata returns what the files of a scan run with profile and the
// user metadata user say of it: the profile's title (its description
// without one), sample and experiment, and user.
func ScanMetadata(profile config.Profile, user map[string]any) writer.Metadata {
	return writer.Metadata{Title: cmp.Or(profile.Metadata.Title, profile.Description), SampleName: profile.Metadata.Sample,
		ExperimentID: profile.Metadata.ExperimentID, UserMetadata: user}
}

// readMetadata returns the metadata of the file at path.
func readMetadata(path string) (writer.Metadata, error) {
	r, err := writer.OpenPlain(path)
	if err != nil {
		return writer.Metadata{}, err
	}
	defer r.Close()
	return r.Metadata()
}

// moduleMetadata returns the metadata of the module files of files that
// exist: the title, sample and experiment of the first that has each (a
// warning names a file that says otherwise), the user metadata of all
// (the first module's where two have a key), the earliest start and the
// latest end; zero where no module file exists. A module file that
// cannot be read is a warning too.
func moduleMetadata(files Files) (writer.Metadata, []Note) {
	var md writer.Metadata
	var warnings []Note
	warn := func(format string, args ...any) {
		warnings = append(warnings, Note{Kind: Warning, Text: fmt.Sprintf(format, args...)})
	}
	from := map[string]string{} // the file each string came from
	for _, m := range files.Modules {
		if !fileExists(m.Path) {
			continue
		}
		mm, err := readMetadata(m.Path)
		if err != nil {
			warn("the master takes no metadata from module file %s: %v", m.Path, err)
			continue
		}
		for _, f := range []struct {
			name     string
			dst, src *string
		}{{"title", &md.Title, &mm.Title}, {"sample", &md.SampleName, &mm.SampleName}, {"experiment identifier", &md.ExperimentID, &mm.ExperimentID}} {
			switch {
			case *f.src == "" || *f.src == *f.dst:
			case *f.dst == "":
				*f.dst, from[f.name] = *f.src, m.Path
			default:
				warn("module files disagree on the %s: %q in %s, %q in %s; the master takes the first",
					f.name, *f.dst, from[f.name], *f.src, m.Path)
			}
		}
		for k, v := range mm.UserMetadata {
			if _, ok := md.UserMetadata[k]; !ok {
				if md.UserMetadata == nil {
					md.UserMetadata = map[string]any{}
				}
				md.UserMetadata[k] = v
			}
		}
		if !mm.StartTime.IsZero() && (md.StartTime.IsZero() || mm.StartTime.Before(md.StartTime)) {
			md.StartTime = mm.StartTime
		}
		if mm.EndTime.After(md.EndTime) {
			md.EndTime = mm.EndTime
		}
	}
	return md, warnings
}

// masterMetadata returns the metadata of the master of files: given's
// strings where set, else the module files' (where they are read), else
// the profile's (ScanMetadata); the module files' user metadata with
// given's keys over theirs; and the module files' times (zero without
// them: the master's writing), with the warnings of the module files
// read.
func masterMetadata(files Files, profile config.Profile, given writer.Metadata, fromModules bool) (writer.Metadata, []Note) {
	var mods writer.Metadata
	var warnings []Note
	if fromModules {
		mods, warnings = moduleMetadata(files)
	}
	p := ScanMetadata(profile, nil)
	md := writer.Metadata{
		Title:        cmp.Or(given.Title, mods.Title, p.Title),
		SampleName:   cmp.Or(given.SampleName, mods.SampleName, p.SampleName),
		ExperimentID: cmp.Or(given.ExperimentID, mods.ExperimentID, p.ExperimentID),
		StartTime:    mods.StartTime,
		EndTime:      mods.EndTime,
	}
	if len(mods.UserMetadata)+len(given.UserMetadata) > 0 {
		md.UserMetadata = maps.Clone(mods.UserMetadata)
		if md.UserMetadata == nil {
			md.UserMetadata = map[string]any{}
		}
		maps.Copy(md.UserMetadata, given.UserMetadata)
	}
	return md, warnings
}

// writeMaster writes the master file of a scan of frames frames of format
// per module before its frames, with the scan's own metadata (profile and
// user, see ScanMetadata), unless the master is there already (and
// Overwrite is not set) for the same modules, frames and metadata; a
// master of the same modules and frames whose metadata differ is brought
// up to date. Module files are named relative to the master's directory,
// so that a scan's files can move together.
func writeMaster(files Files, reg *registry.Registry, profile config.Profile, plan plan.Plan, format frame.Format, user map[string]any, frames int) error {
	_, err := writeMasterWith(files, reg, profile, plan, format, ScanMetadata(profile, user), false, frames)
	return err
}

// finishMaster writes the master file of a scan as writeMaster does, once
// its module files are closed: with their start and end times. It
// returns the warnings of the module files (one it cannot read, two that
// disagree).
func finishMaster(files Files, reg *registry.Registry, profile config.Profile, plan plan.Plan, format frame.Format, user map[string]any, frames int) ([]Note, error) {
	return writeMasterWith(files, reg, profile, plan, format, ScanMetadata(profile, user), true, frames)
}

// writeMasterWith writes the master file with the metadata masterMetadata
// returns (see writeMaster), and returns its warnings.
func writeMasterWith(files Files, reg *registry.Registry, profile config.Profile, plan plan.Plan, format frame.Format,
	given writer.Metadata, fromModules bool, frames int) ([]Note, error) {
	layout, err := layoutOf(reg, profile)
	if err != nil {
		return nil, err
	}
	md, warnings := masterMetadata(files, profile, given, fromModules)
	opts := writer.MasterOptions{Options: fileOptions(files.Master, layout, profile, plan, format, md.UserMetadata)}
	opts.Title, opts.SampleName, opts.ExperimentID = md.Title, md.SampleName, md.ExperimentID
	opts.StartTime, opts.EndTime = md.StartTime, md.EndTime
	opts.Frames = frames
	opts.Height, opts.Width = ArraySize(profile, format)
	if plan.Frames() != frames {
		opts.ImageKey, opts.RotationAngle = nil, nil
	}
	dir := filepath.Dir(files.Master)
	if !opts.Overwrite {
		if old, same := existingMaster(files.Master, dir, files, frames); same {
			if md.StartTime.IsZero() { // no module file to take times from: the master's stand
				md.StartTime, md.EndTime = old.StartTime, old.EndTime
			}
			if old.Equal(md) {
				return warnings, nil
			}
			opts.Overwrite = true // the same scan's master, brought up to date
		}
	}
	for _, m := range files.Modules {
		rel, err := filepath.Rel(dir, m.Path)
		if err != nil {
			rel = m.Path
		}
		opts.Modules = append(opts.Modules, writer.MasterModule{ID: m.Module.ID, File: rel,
			X: m.Module.X, Y: m.Module.Y, Height: format.Height(), Width: format.Width()})
	}
	return warnings, writer.CreateMaster(opts)
}

// Only returns the files of module id alone, without a master: what a
// receiver of one module writes.
func (f Files) Only(id int) (Files, error) {
	for _, m := range f.Modules {
		if m.Module.ID == id {
			return Files{Modules: []File{m}}, nil
		}
	}
	var ids []string
	for _, m := range f.Modules {
		ids = append(ids, strconv.Itoa(m.Module.ID))
	}
	return Files{}, Usage(fmt.Errorf("--module %d: the profile's detector.modules has modules %s", id, strings.Join(ids, ", ")))
}

// WriteMasterAhead writes the master file of a scan before or after its
// module files (h5ingest master): its length is the plan's, else the
// longest module file present. Its title, sample, experiment and user
// metadata are given's where set (given's user metadata keys over the
// module files'), else those of the module files present, else the
// profile's; its start and end are the module files' (the earliest start,
// the latest end), or its own writing where none is there. Module files
// not there yet are a warning in the result's notes: the master shows
// their frames missing until they exist. An existing master of the same
// modules and length is kept, or brought up to date where its metadata
// differ.
func WriteMasterAhead(files Files, reg *registry.Registry, profile config.Profile, pl plan.Plan, given writer.Metadata) (MasterResult, error) {
	if files.Master == "" {
		return MasterResult{}, Usage(fmt.Errorf("the profile's detector has one module: there is no master file to write"))
	}
	names := []error{checkName("master file", files.Master, true)}
	for _, m := range files.Modules {
		names = append(names, checkName("module file", m.Path, true))
	}
	if err := errors.Join(names...); err != nil {
		return MasterResult{}, err
	}
	format, err := profile.Detector.Format()
	if err != nil {
		return MasterResult{}, Usage(err)
	}
	frames, err := moduleFrames(files, format, pl.Frames())
	if err != nil {
		return MasterResult{}, err
	}
	notes, err := writeMasterWith(files, reg, profile, pl, format, given, true, frames)
	if err != nil {
		return MasterResult{}, err
	}
	var absent []string
	for _, m := range files.Modules {
		if !fileExists(m.Path) {
			absent = append(absent, m.Path)
		}
	}
	if len(absent) == len(files.Modules) {
		notes = append(notes, Note{Kind: Warning, Text: fmt.Sprintf("no module file exists yet (%s): the master shows them once a scan writes them there",
			strings.Join(absent, ", "))})
	} else if len(absent) > 0 {
		notes = append(notes, Note{Kind: Warning, Text: fmt.Sprintf("module files absent: %s; the master shows their frames missing until they exist",
			strings.Join(absent, ", "))})
	}
	h, w := ArraySize(profile, format)
	return MasterResult{Path: files.Master, Modules: len(files.Modules), Frames: frames, Height: h, Width: w, Notes: notes}, nil
}
