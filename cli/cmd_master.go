package cli

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/writer"
)

func newMasterCmd(stages *registry.Registry) *cobra.Command {
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
profile's output.template names the module files, and the master's name is
the template with the word holding {module} (m{module}, mod{module} or
{module} alone) replaced by "master".

The master's title, sample, experiment and user metadata are those of the
module files present (else the profile's), and --title, --sample,
--experiment-id and --meta replace them (--meta key by key); its start and
end times are the earliest start and the latest end of the module files.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range masterRefused {
				if cmd.Flags().Changed(name) {
					return scan.Usage(fmt.Errorf("--%s: master writes no scan, only its master file: there is nothing to serve or report", name))
				}
			}
			now := time.Now()
			if date != "" {
				var err error
				if now, err = time.ParseInLocation("20060102", date, time.Local); err != nil {
					return scan.Usage(fmt.Errorf("--date %q: want YYYYMMDD", date))
				}
			}
			return master(&s, now, cmd.Flags().Changed)
		},
	}
	s.register(cmd.Flags(), stages)
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
	"darks", "flats", "projections", "sequence", "angle-start", "angle-end", "positions",
	"title", "sample", "experiment-id", "meta"}

// masterRefused are the scan flags that ask for what master does not do.
var masterRefused = []string{"metrics", "metrics-linger", "report"}

// master writes the master file of a scan as the profile and the flags say;
// changed reports whether a flag was given.
func master(s *scanFlags, now time.Time, changed func(string) bool) error {
	profile, plan, err := s.load()
	if err != nil {
		return err
	}
	files, err := s.files(profile, now)
	if err != nil {
		return err
	}
	// What the command line gives replaces the module files' metadata.
	given := writer.Metadata{UserMetadata: s.user}
	for flag, v := range map[string]struct{ dst, src *string }{
		"title":         {&given.Title, &profile.Metadata.Title},
		"sample":        {&given.SampleName, &profile.Metadata.Sample},
		"experiment-id": {&given.ExperimentID, &profile.Metadata.ExperimentID},
	} {
		if changed(flag) {
			*v.dst = *v.src
		}
	}
	m, err := scan.WriteMasterAhead(files, s.stages, profile, plan, given)
	if err != nil {
		return err
	}
	for _, n := range m.Notes {
		printNote(os.Stderr, n)
	}
	fmt.Fprintf(os.Stdout, "%s: master of %d modules, %d frames of %d x %d\n", m.Path, m.Modules, m.Frames, m.Height, m.Width)
	return nil
}
