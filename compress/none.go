package compress

// none stores chunks as they are, with no filters.
type none struct{}

// Encode appends src to dst.
func (none) Encode(dst, src []byte) ([]byte, error) { return append(dst, src...), nil }

// Decode appends src to dst.
func (none) Decode(dst, src []byte) ([]byte, error) { return append(dst, src...), nil }

// Filters returns an empty pipeline.
func (none) Filters() []Filter { return nil }

// Bound returns n.
func (none) Bound(n int) int { return n }
