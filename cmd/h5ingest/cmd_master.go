package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/writer"
)

func newMasterCmd() *cobra.Command {
	var s scanFlags
	var date string
	cmd := &cobra.Command{
		Use:   "master --profile PROFILE (-o MASTER.h5 | --scan-id ID)",
		Short: "Write the master file of a multi-module scan, before or after its module files",
		Long: `Write the master file that shows a multi-module scan as one detector: the
frame stack of the whole array and each module's records, as virtual datasets
of the module files. The profile gives the modules and their positions, the
plan the scan's length (without a plan, the longest module file present), and
the file names follow the same rules as replay and acquire: -o NAME.h5 names
the master and the module files are NAME_m<K>.h5 beside it; without -o the
profile's output.template names the module files, with {module} replaced by
"master" for the master.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range masterRefused {
				if cmd.Flags().Changed(name) {
					return usageError(fmt.Errorf("--%s: master writes no scan, only its master file: there is nothing to serve or report", name))
				}
			}
			now := time.Now()
			if date != "" {
				var err error
				if now, err = time.ParseInLocation("20060102", date, time.Local); err != nil {
					return usageError(fmt.Errorf("--date %q: want YYYYMMDD", date))
				}
			}
			return master(&s, now)
		},
	}
	s.register(cmd.Flags())
	// The other scan flags do not change a master file: master takes them
	// (those that set profile keys are checked as always) without showing
	// them in its help.
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(masterFlags, f.Name) {
			f.Hidden = true
		}
	})
	cmd.Flags().StringVar(&date, "date", "", "date of the scan, YYYYMMDD, for {date} in the file name template (default: today)")
	return cmd
}

// masterFlags are the scan flags that shape a master file.
var masterFlags = []string{"profile", "output", "scan-id", "layout", "overwrite",
	"darks", "flats", "projections", "sequence", "angle-start", "angle-end", "positions"}

// masterRefused are the scan flags that ask for what master does not do.
var masterRefused = []string{"metrics", "metrics-linger", "report"}

// master writes the master file of a scan as the profile and the flags say.
func master(s *scanFlags, now time.Time) error {
	profile, plan, err := s.load()
	if err != nil {
		return err
	}
	files, err := s.scanFiles(profile, now)
	if err != nil {
		return err
	}
	if files.master == "" {
		return usageError(fmt.Errorf("the profile's detector has one module: there is no master file to write"))
	}
	names := []error{checkName("master file", files.master, true)}
	for _, m := range files.modules {
		names = append(names, checkName("module file", m.path, true))
	}
	if err := errors.Join(names...); err != nil {
		return err
	}
	format, err := profile.Detector.Format()
	if err != nil {
		return usageError(err)
	}
	frames, err := moduleFrames(files, format, plan.Frames())
	if err != nil {
		return err
	}
	if err := writeMaster(files, profile, plan, format, nil, frames); err != nil {
		return err
	}
	var absent []string
	for _, m := range files.modules {
		if !fileExists(m.path) {
			absent = append(absent, m.path)
		}
	}
	if len(absent) == len(files.modules) {
		fmt.Fprintf(os.Stderr, "h5ingest: warning: no module file exists yet (%s): the master shows them once a scan writes them there\n",
			strings.Join(absent, ", "))
	} else if len(absent) > 0 {
		fmt.Fprintf(os.Stderr, "h5ingest: warning: module files absent: %s; the master shows their frames missing until they exist\n",
			strings.Join(absent, ", "))
	}
	fmt.Fprintf(os.Stdout, "%s: master of %d modules, %d frames of %d x %d\n", files.master, len(files.modules), frames,
		arrayHeight(profile, format), arrayWidth(profile, format))
	return nil
}

// moduleFrames returns the master's frame count: the plan's, else the
// longest module file present. Module files present must have the
// profile's frame size.
func moduleFrames(files scanFiles, format frame.Format, planned int) (int, error) {
	longest := 0
	for _, m := range files.modules {
		if _, err := os.Stat(m.path); errors.Is(err, os.ErrNotExist) {
			continue
		}
		r, err := writer.OpenPlain(m.path)
		if err != nil {
			return 0, err
		}
		h, w, es, n := r.Height, r.Width, r.ElemSize, r.Frames
		r.Close()
		if h != format.Height() || w != format.Width() || es != format.PixelSize() {
			return 0, fmt.Errorf("module file %s holds %d x %d frames of %d bytes a pixel, the profile's detector %d x %d of %d",
				m.path, h, w, es, format.Height(), format.Width(), format.PixelSize())
		}
		longest = max(longest, n)
	}
	if planned > 0 {
		return planned, nil
	}
	if longest == 0 {
		return 0, usageError(errors.New("no plan and no module file to take the scan's length from: give the plan (e.g. --projections N)"))
	}
	return longest, nil
}

// scanFile is the file of one module of a scan.
type scanFile struct {
	module config.Module
	path   string
}

// scanFiles are the files of a scan: one per module, and the master file
// when the detector has several modules ("" otherwise).
type scanFiles struct {
	master  string
	modules []scanFile
}

// scanFiles returns the files of a scan of every module of the profile.
// With one module, the file is -o, or the profile's template. With
// several, -o NAME.h5 names the master and module K's file is
// NAME_m<K>.h5 beside it; without -o, the template names module K's file
// with {module} replaced by K and the master's with {module} replaced by
// "master" (a template without {module} names the master, and the module
// files take the _m<K> suffix as with -o).
func (s *scanFlags) scanFiles(p config.Profile, now time.Time) (scanFiles, error) {
	mods := p.Detector.Modules
	if len(mods) == 1 {
		out, err := s.outputPath(p, mods[0].ID)
		return scanFiles{modules: []scanFile{{mods[0], out}}}, err
	}
	if s.output == "" && s.scanID == "" {
		return scanFiles{}, usageError(errors.New("no output file: give -o MASTER.h5, or --scan-id ID for the profile's output.template"))
	}
	var files scanFiles
	name := func(o config.Output, module int) (string, error) {
		path, err := o.FileName(s.scanID, module, now)
		if err != nil {
			return "", usageError(fmt.Errorf("--scan-id: %w", err))
		}
		return path, nil
	}
	var err error
	if s.output == "" && strings.Contains(p.Output.Template, "{module}") {
		o := p.Output
		o.Template = strings.ReplaceAll(o.Template, "{module}", "master")
		if files.master, err = name(o, 0); err != nil {
			return scanFiles{}, err
		}
		for _, m := range mods {
			path, err := name(p.Output, m.ID)
			if err != nil {
				return scanFiles{}, err
			}
			files.modules = append(files.modules, scanFile{m, path})
		}
		return files, nil
	}
	files.master = s.output
	if files.master == "" {
		if files.master, err = name(p.Output, 0); err != nil {
			return scanFiles{}, err
		}
	}
	if !strings.HasSuffix(files.master, ".h5") {
		return scanFiles{}, usageError(fmt.Errorf("-o %s: the master file's name must end in .h5", files.master))
	}
	stem := strings.TrimSuffix(files.master, ".h5")
	for _, m := range mods {
		files.modules = append(files.modules, scanFile{m, stem + "_m" + strconv.Itoa(m.ID) + ".h5"})
	}
	return files, nil
}

// arrayHeight and arrayWidth return the size of the array image: the
// bounding box of the modules at their offsets.
func arrayHeight(p config.Profile, f frame.Format) int {
	h := 0
	for _, m := range p.Detector.Modules {
		h = max(h, m.Y+f.Height())
	}
	return h
}

func arrayWidth(p config.Profile, f frame.Format) int {
	w := 0
	for _, m := range p.Detector.Modules {
		w = max(w, m.X+f.Width())
	}
	return w
}

// sameMaster reports whether path is already the master file of files
// and frames (one written ahead by h5ingest master), which a scan keeps.
func sameMaster(path, dir string, files scanFiles, frames int) bool {
	r, err := writer.OpenPlain(path)
	if err != nil {
		return false
	}
	defer r.Close()
	if r.Frames != frames || len(r.Modules) != len(files.modules) {
		return false
	}
	for i, m := range r.Modules {
		if m.ID != files.modules[i].module.ID || filepath.Join(dir, m.File) != filepath.Clean(files.modules[i].path) {
			return false
		}
	}
	return true
}

// writeMaster writes the master file of a scan of frames frames of format
// per module, unless the master is there already (and Overwrite is not
// set) for the same modules and frames. Module files are named relative to
// the master's directory, so that a scan's files can move together.
func writeMaster(files scanFiles, profile config.Profile, plan plan.Plan, format frame.Format, user map[string]any, frames int) error {
	opts := writer.MasterOptions{Options: fileOptions(files.master, profile, plan, format, user)}
	opts.Frames = frames
	opts.Height, opts.Width = arrayHeight(profile, format), arrayWidth(profile, format)
	if plan.Frames() != frames {
		opts.ImageKey, opts.RotationAngle = nil, nil
	}
	dir := filepath.Dir(files.master)
	if !opts.Overwrite && sameMaster(files.master, dir, files, frames) {
		return nil
	}
	for _, m := range files.modules {
		rel, err := filepath.Rel(dir, m.path)
		if err != nil {
			rel = m.path
		}
		opts.Modules = append(opts.Modules, writer.MasterModule{ID: m.module.ID, File: rel,
			X: m.module.X, Y: m.module.Y, Height: format.Height(), Width: format.Width()})
	}
	return writer.CreateMaster(opts)
}

// only returns the files of module id alone, without a master: what a
// receiver of one module writes.
func (f scanFiles) only(id int) (scanFiles, error) {
	for _, m := range f.modules {
		if m.module.ID == id {
			return scanFiles{modules: []scanFile{m}}, nil
		}
	}
	var ids []string
	for _, m := range f.modules {
		ids = append(ids, strconv.Itoa(m.module.ID))
	}
	return scanFiles{}, usageError(fmt.Errorf("--module %d: the profile's detector.modules has modules %s", id, strings.Join(ids, ", ")))
}
