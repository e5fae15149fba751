//go:build !amd64

package gpu

// packed12Vector decodes nothing: there are no vector decodes here.
func packed12Vector(dst, src []byte, rotated bool) int { return 0 }

// packed24Vector decodes nothing: there are no vector decodes here.
func packed24Vector(dst, src []byte, rotated bool) int { return 0 }

// reverse16Vector reverses nothing: there are no vector decodes here.
func reverse16Vector(dst, src []byte) int { return 0 }

// reverse32Vector reverses nothing: there are no vector decodes here.
func reverse32Vector(dst, src []byte) int { return 0 }
