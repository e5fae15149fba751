package writer

import (
	"os"
	"slices"
	"syscall"
	"testing"
)

// otherGroup returns a group id the process may give its files other
// than its own, or skips the test where it has none.
func otherGroup(t *testing.T) int {
	t.Helper()
	own := os.Getegid()
	if os.Geteuid() == 0 {
		return own + 4242 // root gives a file any group
	}
	groups, _ := os.Getgroups()
	if i := slices.IndexFunc(groups, func(g int) bool { return g != own }); i >= 0 {
		return groups[i]
	}
	t.Skip("the process belongs to no group but its own")
	return -1
}

// TestAccess checks that a module's file and a master file get the mode
// and group they are given, whatever the umask, and keep them under
// their final names; and that without Access they are as the process
// makes them.
func TestAccess(t *testing.T) {
	gid := otherGroup(t)
	old := syscall.Umask(0o027) // a service's UMask=0027
	t.Cleanup(func() { syscall.Umask(old) })
	for _, tc := range []struct {
		name   string
		access *Access
		mode   os.FileMode
		gid    int
	}{
		{"as made", nil, 0o640, os.Getegid()},
		{"group readable, another group", &Access{Mode: 0o640, GID: gid}, 0o640, gid},
		{"everyone reads", &Access{Mode: 0o644, GID: -1}, 0o644, os.Getegid()},
		{"group only", &Access{GID: gid}, 0o640, gid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
			o.Access = tc.access
			writeTestFile(t, o, pipeNone)
			mo := masterOptions(t.TempDir(), LayoutNXtomo)
			mo.Access = tc.access
			if err := CreateMaster(mo); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{o.Path, mo.Path} {
				info, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if g := int(info.Sys().(*syscall.Stat_t).Gid); info.Mode().Perm() != tc.mode || g != tc.gid {
					t.Errorf("%s: mode %v, group %d; want %v, %d", path, info.Mode().Perm(), g, tc.mode, tc.gid)
				}
			}
		})
	}
}

// TestAccessRefused checks that a group the process may not give is an
// error of Create, which leaves no file.
func TestAccessRefused(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may give a file any group")
	}
	o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	o.Access = &Access{GID: 0, Mode: 0o640} // root's group, which no test runs in
	if _, err := Create(o); err == nil {
		t.Fatal("Create gave a file root's group")
	}
	if _, err := os.Stat(TempName(o.Path)); !os.IsNotExist(err) {
		t.Errorf("a refused Create left %s (%v)", TempName(o.Path), err)
	}
}
