package scan

import (
	"fmt"

	"h5ingest/registry"
)

// ReadersWarning returns what a user who chooses compression must know
// about the readers of the files, as the codec's entry in stages says, or
// "" when there is nothing to say. The commands that start a scan or
// check a profile show it; a scan's pre-scan checks (Checks.Run) give it
// as a warning.
func ReadersWarning(stages *registry.Registry, compression string) string {
	if stages == nil {
		return ""
	}
	c, _ := stages.Codec(compression)
	return c.Warning
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
