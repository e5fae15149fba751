package plan

import "fmt"

// Recorded describes in one line the scan that a file's image keys and
// rotation angles record, one of each per frame: "2 darks, 3 flats, 180
// projections at 0 to 179 degrees". Projections that all share one angle
// are said to have no rotation recorded.
func Recorded(keys []int8, angles []float64) string {
	var count [Invalid + 1]int
	lo, hi := 0.0, 0.0
	first := true
	for i, k := range keys {
		if k >= 0 && int(k) < len(count) {
			count[k]++
		}
		if k != Projection || i >= len(angles) {
			continue
		}
		if first || angles[i] < lo {
			lo = angles[i]
		}
		if first || angles[i] > hi {
			hi = angles[i]
		}
		first = false
	}
	angle := fmt.Sprintf("at %g to %g degrees", lo, hi)
	if lo == hi && count[Projection] > 1 {
		angle = fmt.Sprintf("all at %g degrees (no rotation recorded)", lo)
	}
	return fmt.Sprintf("%d darks, %d flats, %d projections %s", count[DarkField], count[FlatField], count[Projection], angle)
}
