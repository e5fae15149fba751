package writer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FinalName returns the final name of the scan whose temporary file is
// temp (see TempName), and false when temp is not named as one.
func FinalName(temp string) (string, bool) {
	base := filepath.Base(temp)
	if !strings.HasPrefix(base, ".") || !strings.HasSuffix(base, ".part") || len(base) <= len("..part") {
		return "", false
	}
	return filepath.Join(filepath.Dir(temp), strings.TrimSuffix(strings.TrimPrefix(base, "."), ".part")), true
}

// Recover finishes the temporary file of a scan whose writer did not
// close it (killed, or its machine lost): it clears the open-for-writing
// status flags of the file's superblock, as h5clear -s does, so that
// readers other than SWMR readers open it, and renames it to its final
// name. The file keeps what its writer last flushed: the frames recorded
// by then, the rest recorded missing.
//
// Recover refuses, with a *LockedError, a file that a scan still writes,
// and, with ErrExists, a final name that exists. It returns the final name.
func Recover(temp string) (string, error) {
	final, ok := FinalName(temp)
	if !ok {
		return "", fmt.Errorf("recover %s: not the temporary name of a scan's file (.NAME.part)", temp)
	}
	// A symbolic link is not followed: recover writes the file it
	// finishes, and a link may point to any file.
	info, err := os.Lstat(temp)
	if err != nil {
		return "", fmt.Errorf("recover %s: %w", temp, err)
	}
	if info.Mode()&os.ModeSymlink != 0 {
		return "", fmt.Errorf("recover %s: a symbolic link, not a scan's file: refusing to follow it; recover the file it points to by its own .NAME.part name", temp)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("recover %s: not a regular file", temp)
	}
	lock, err := lockOutput(final)
	if err != nil {
		return "", fmt.Errorf("recover %s: %w", temp, err)
	}
	defer lock.release()
	if _, err := os.Lstat(final); err == nil {
		return "", fmt.Errorf("recover %s: %s %w", temp, final, ErrExists)
	}
	if err := clearStatus(temp); err != nil {
		return "", fmt.Errorf("recover %s: %w", temp, err)
	}
	// A hard link, then the temporary name removed: never replaces a file
	// that appeared meanwhile.
	if err := os.Link(temp, final); err != nil {
		if errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("recover %s: %s %w", temp, final, ErrExists)
		}
		if err := renameNoReplace(temp, final); err != nil {
			if errors.Is(err, os.ErrExist) {
				return "", fmt.Errorf("recover %s: %s %w", temp, final, ErrExists)
			}
			return "", fmt.Errorf("recover %s: %w", temp, err)
		}
		return final, nil
	}
	if err := os.Remove(temp); err != nil {
		return "", fmt.Errorf("recover %s: remove temporary name: %w", temp, err)
	}
	return final, nil
}
