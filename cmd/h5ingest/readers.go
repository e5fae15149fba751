package main

import (
	"fmt"
	"io"
)

// compressionWarning returns what a user who chooses compression must know
// about the readers of the files, or "" when there is nothing to say.
func compressionWarning(compression string) string {
	if compression != "bszstd" {
		return ""
	}
	return "bszstd (bitshuffle + zstd) files cannot be read with bitshuffle older than 0.4, " +
		"which is what Debian 12 ships (bitshuffle 0.3.5, which its python3-hdf5plugin uses too): " +
		"it takes zstd chunks for uncompressed ones, and h5py then fails, crashes (segmentation fault) " +
		"or returns wrong pixels without any error. Readers need bitshuffle 0.4 or newer " +
		"(hdf5plugin from PyPI); choose bslz4 for files that Debian 12's readers must open"
}

// warnReaders prints the warning compression calls for, if any, on w. The
// commands that start a scan or check a profile call it.
func warnReaders(w io.Writer, compression string) {
	if msg := compressionWarning(compression); msg != "" {
		fmt.Fprintf(w, "h5ingest: warning: %s\n", msg)
	}
}
