// Package version says which h5ingest this is, for --version and for the
// files and captures a scan writes.
//
// A release build sets it with the linker:
//
//	go build -ldflags "-X h5ingest/version.version=v1.2.0" ./cmd/h5ingest
//
// Without that it is taken from the build information Go records: the
// module's version, or the commit the binary was built from (with
// "+dirty" where the work tree had changes), or "devel".
package version

import (
	"runtime/debug"
	"sync"
)

// version is set at build time with -ldflags "-X h5ingest/version.version=...".
var version string

// String returns the version of h5ingest, such as "v1.2.0" or
// "devel+3f2a1c9e0b7d" (a build from a commit), never "".
var String = sync.OnceValue(func() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(info)
})

// fromBuildInfo returns the version that info records.
func fromBuildInfo(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	v := "devel+" + rev[:min(len(rev), 12)]
	if dirty {
		v += "-dirty"
	}
	return v
}
