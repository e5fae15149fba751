package scan

import (
	"fmt"
	"io"

	"h5ingest/registry"
)

// readersWarning returns what a user who chooses compression must know
// about the readers of the files, as the codec's entry in stages says, or
// "" when there is nothing to say.
func readersWarning(stages *registry.Registry, compression string) string {
	if stages == nil {
		return ""
	}
	c, _ := stages.Codec(compression)
	return c.Warning
}

// WarnReaders prints the warning compression calls for, if any, on w. The
// commands that start a scan or check a profile call it.
func WarnReaders(w io.Writer, stages *registry.Registry, compression string) {
	if msg := readersWarning(stages, compression); msg != "" {
		fmt.Fprintf(w, "h5ingest: warning: %s\n", msg)
	}
}

// FormatBytes returns n bytes as a person reads them: 1.50 GB, 12.3 MB.
func FormatBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
