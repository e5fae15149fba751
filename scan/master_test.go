package scan

import "testing"

// TestMasterTemplate checks the name of a master file derived from its
// module files' template: the word holding {module} becomes "master".
func TestMasterTemplate(t *testing.T) {
	for _, tc := range []struct{ template, want string }{
		{"{scan}_{date}_m{module}.h5", "{scan}_{date}_master.h5"},
		{"m{module}_{scan}.h5", "master_{scan}.h5"},
		{"{scan}_mod{module}.h5", "{scan}_master.h5"},
		{"{scan}_module{module}.h5", "{scan}_master.h5"},
		{"{scan}_{module}.h5", "{scan}_master.h5"},
		{"{scan}-{module}-{date}.h5", "{scan}-master-{date}.h5"},
		{"{scan}{module}.h5", "{scan}master.h5"},
		{"{module}/{scan}_m{module}.h5", "master/{scan}_master.h5"},
		{"{scan}_{module}th.h5", "{scan}_master.h5"},
		{"{scan}_2m{module}.h5", "{scan}_2master.h5"},
		{"{scan}.h5", "{scan}.h5"},
	} {
		if got := MasterTemplate(tc.template); got != tc.want {
			t.Errorf("MasterTemplate(%q) = %q, want %q", tc.template, got, tc.want)
		}
	}
}
