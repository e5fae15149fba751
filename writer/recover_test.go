package writer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFinalName(t *testing.T) {
	for _, tt := range []struct {
		temp, final string
		ok          bool
	}{
		{"/d/.scan.h5.part", "/d/scan.h5", true},
		{TempName("/d/x/a b.h5"), "/d/x/a b.h5", true},
		{"/d/scan.h5.part", "", false},
		{"/d/.scan.h5", "", false},
		{"/d/..part", "", false},
		{"/d/scan.h5", "", false},
	} {
		if got, ok := FinalName(tt.temp); got != tt.final || ok != tt.ok {
			t.Errorf("FinalName(%q) = %q, %v, want %q, %v", tt.temp, got, ok, tt.final, tt.ok)
		}
	}
}

// TestRecoverRefuses: a name that is not a temporary one, a final name
// that exists (left as it was), and a file whose lock is held.
func TestRecoverRefuses(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "scan.h5")
	temp := TempName(final)
	if _, err := Recover(final); err == nil {
		t.Error("Recover of a final name succeeded")
	}
	for _, name := range []string{final, temp} {
		if err := os.WriteFile(name, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Recover(temp); !errors.Is(err, ErrExists) {
		t.Errorf("Recover over an existing final name: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(final); string(b) != final {
		t.Error("Recover changed the existing final file")
	}
	os.Remove(final)
	l, err := lockOutput(final)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	if _, err := Recover(temp); !errors.Is(err, ErrLocked) {
		t.Errorf("Recover of a locked file: %v, want ErrLocked", err)
	}
	if b, _ := os.ReadFile(temp); string(b) != temp {
		t.Error("Recover changed a locked file")
	}
}
