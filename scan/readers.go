package scan

import (
	"fmt"
	"io"
)

// readersWarning returns what a user who chooses compression must know
// about the readers of the files, or "" when there is nothing to say.
func readersWarning(compression string) string {
	if compression != "bszstd" {
		return ""
	}
	return "bszstd (bitshuffle + zstd) files cannot be read with bitshuffle older than 0.4, " +
		"which is what Debian 12 ships (bitshuffle 0.3.5, which its python3-hdf5plugin uses too): " +
		"it takes zstd chunks for uncompressed ones, and h5py then fails, crashes (segmentation fault) " +
		"or returns wrong pixels without any error. Readers need bitshuffle 0.4 or newer " +
		"(hdf5plugin from PyPI); choose bslz4 for files that Debian 12's readers must open"
}

// WarnReaders prints the warning compression calls for, if any, on w. The
// commands that start a scan or check a profile call it.
func WarnReaders(w io.Writer, compression string) {
	if msg := readersWarning(compression); msg != "" {
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
