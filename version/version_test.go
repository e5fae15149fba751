package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	tests := []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"module version", debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}}, "v1.2.0"},
		{"pseudo-version", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123203500-3f2a1c9e0b7d+dirty"}}, "v0.0.0-20261123203500-3f2a1c9e0b7d+dirty"},
		{"commit", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "3f2a1c9e0b7d5a6e8f0123456789abcdef012345"}, {Key: "vcs.modified", Value: "false"}}}, "devel+3f2a1c9e0b7d"},
		{"changed commit", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "3f2a1c9e0b7d5a6e8f0123456789abcdef012345"}, {Key: "vcs.modified", Value: "true"}}}, "devel+3f2a1c9e0b7d-dirty"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
	}
	for _, tt := range tests {
		if got := fromBuildInfo(&tt.info); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	if String() == "" {
		t.Error("String() is empty")
	}
}
