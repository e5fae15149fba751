//go:build !amd64

package gpu

// bitplaneBand reports that there is no vector decode here.
func bitplaneBand(dst []byte, stride int, chip []byte, r0, r1, w, depth int, lfsr, rotated bool) bool {
	return false
}

// bitplaneRow reports that there is no vector decode here.
func bitplaneRow(dst, row []byte, depth int, lfsr, rotated bool) bool { return false }
