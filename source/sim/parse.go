package sim

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ParseFault parses the frames a fault hits as a command line gives
// them, for a scan of n frames: empty (none), a rate from 0 to 1 written
// with a decimal point (such as 0.01), or a comma list of frame numbers
// below n.
func ParseFault(s string, n int) (FaultSpec, error) {
	var spec FaultSpec
	s = strings.TrimSpace(s)
	if s == "" {
		return spec, nil
	}
	if strings.ContainsAny(s, ".eE") {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return spec, errors.New("want a rate from 0 to 1 (such as 0.01) or a comma list of frame numbers")
		}
		spec.Rate = r
		return spec, nil
	}
	for _, f := range strings.Split(s, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 || i >= n {
			return spec, fmt.Errorf("frame %q: want frame numbers from 0 to %d, or a rate such as 0.01", f, n-1)
		}
		spec.Frames = append(spec.Frames, i)
	}
	return spec, nil
}

// ParseModules parses a comma list of module ids, such as 0,1,2,3, each
// from 0 to 65535 and listed once.
func ParseModules(s string) ([]uint16, error) {
	var ids []uint16
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%q is not a module id from 0 to 65535", f)
		}
		if slices.Contains(ids, uint16(id)) {
			return nil, fmt.Errorf("module %d listed twice", id)
		}
		ids = append(ids, uint16(id))
	}
	return ids, nil
}
