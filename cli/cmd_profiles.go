package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"h5ingest/config"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/serve"
)

func newProfilesCmd(stages *registry.Registry) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profiles",
		Short: "List, show and check beamline profiles",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "list",
			Short: "List the profiles built into h5ingest",
			Args:  usageArgs(cobra.NoArgs),
			RunE: func(cmd *cobra.Command, _ []string) error {
				return listProfiles(cmd.OutOrStdout(), stages)
			},
		},
		newProfilesShowCmd(stages),
		&cobra.Command{
			Use:   "names",
			Short: "List the stages a profile may name: sources, backends, codecs, layouts and processors",
			Args:  usageArgs(cobra.NoArgs),
			RunE: func(cmd *cobra.Command, _ []string) error {
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				for _, e := range stages.Entries() {
					fmt.Fprintf(w, "%s\t%s\t%s\n", e.Kind, e.Name, e.Doc)
				}
				return w.Flush()
			},
		},
		&cobra.Command{
			Use:   "check FILE",
			Short: "Check a profile without running a scan",
			Args:  usageArgs(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, args []string) error {
				p, err := config.Load(args[0], stages.Names())
				if err == nil {
					err = scan.CheckSource(stages, p)
				}
				if err != nil {
					return scan.Usage(err)
				}
				if msg := scan.ReadersWarning(stages, p.Output.Compression); msg != "" {
					printNote(cmd.ErrOrStderr(), scan.Note{Kind: scan.Warning, Text: msg})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", args[0])
				return nil
			},
		},
	)
	return cmd
}

func listProfiles(out io.Writer, stages *registry.Registry) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, name := range config.BuiltinNames() {
		p, err := config.Load(name, stages.Names())
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\t%s\n", name, p.Description)
	}
	return w.Flush()
}

func newProfilesShowCmd(stages *registry.Registry) *cobra.Command {
	var asYAML bool
	cmd := &cobra.Command{
		Use:   "show NAME|FILE",
		Short: "Print a profile merged over the defaults and the environment, with where each value came from",
		Long: `Print a profile merged over the defaults and the environment: every key, its value and
where the value came from. With --yaml, print it as a profile file, each key under a line
saying what it means: save it, edit it, check it with profiles check and give it to
--profile.`,
		Example: `  h5ingest profiles show pimega-135d-tomo --yaml > my-beamline.yaml
  h5ingest profiles check my-beamline.yaml`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return showProfile(cmd.OutOrStdout(), stages, args[0], asYAML)
		},
	}
	cmd.Flags().BoolVar(&asYAML, "yaml", false, "print the merged profile as a profile file (YAML) that loads as the same profile")
	return cmd
}

// showProfile prints every key's merged value and its layer, as a table
// or as a profile file.
func showProfile(out io.Writer, stages *registry.Registry, ref string, asYAML bool) error {
	p, sources, err := config.LoadLayers(config.Layers{Profile: ref, Names: stages.Names()})
	if err != nil {
		return scan.Usage(err)
	}
	if asYAML {
		b, err := p.YAML(sources)
		if err != nil {
			return fmt.Errorf("profile %s as YAML: %w", ref, err)
		}
		fmt.Fprintf(out, "# h5ingest profile %s, merged over the defaults and the environment: after each\n# value, where it came from. Check it with: h5ingest profiles check FILE\n", ref)
		_, err = out.Write(b)
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, k := range serve.ProfileKeys(p, sources, stages.Names()) {
		from := k.From
		if k.OneOf != nil {
			from += "; one of " + config.OneOf(k.OneOf)
			if len(k.OneOf) == 0 {
				from += "none registered"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t# %s\n", k.Key, k.Value, from)
	}
	return w.Flush()
}
